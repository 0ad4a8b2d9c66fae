"""sgl-project/sglang#21235 as a known cause (issue 33's demonstration of a rule with one home: the
function `_pause_split_across_tokenizer_workers` and its entry in the engines part's `causes`,
analysis/parts/engines.py; its test here; a row in docs/field-guide.md).

The recorded demo job whose engine holds requests between its HTTP layer and its scheduler with
every pause answered by a continue (analysis/demo2/engine_paused_by_update: `engine-held`), given
the tokenizer workers of `--tokenizer-worker-num` by a named transformation of a real process row
(real/sglang-titles: `sglang::tokenizer_worker:<pid>` under an engine's HTTP process)."""

from __future__ import annotations

import json
from pathlib import Path

from slime_hangdoctor.analysis.diagnosis import diagnose
from slime_hangdoctor.bundle import open_bundle
from slime_hangdoctor.load import load_snapshot
from slime_hangdoctor.parsers.processes import parse_processes
from slime_hangdoctor.snapshot import Snapshot
from slime_hangdoctor.topology import build_topology
from slime_hangdoctor.verdict import Verdict
from tests.fixtures import transforms as tf

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
HELD = FIXTURES / "analysis" / "demo2" / "engine_paused_by_update.tar.gz"
TITLES = FIXTURES / "real" / "sglang-titles"
RULE = "known-tokenizer-worker-pause-split"
# the held engine of the recording: its HTTP process, on the recording's node
HELD_URL, SERVER_PID, NODE = "http://127.0.0.1:29548", 30147, "192.0.2.2"


def _recorded() -> Snapshot:
    with open_bundle(HELD) as bundle:
        return load_snapshot(bundle)


def _worker() -> object:
    pid = json.loads((TITLES / "pids.json").read_text())["tokenizer_worker"]
    rows = parse_processes((TITLES / "processes.json").read_text())
    return next(r for r in rows if r.pid == pid)


def _verdict(snap: Snapshot) -> Verdict:
    return diagnose(snap, build_topology(snap)).verdict


def _with_workers(*pids: int) -> Snapshot:
    return tf.tokenizer_workers_added(
        _recorded(), _worker(), server_pid=SERVER_PID, node_ip=NODE, pids=pids
    )


def test_a_held_engine_with_several_tokenizer_workers_is_the_known_pause_split() -> None:
    before = _verdict(_recorded())
    assert "engine-held" in [f.rule for f in before.findings]
    after = _verdict(_with_workers(40001, 40002))
    (found,) = [f for f in after.findings if f.rule == RULE]
    assert HELD_URL in found.message and "sglang#21235" in found.message
    assert any("pids 40001, 40002" in line for line in found.evidence)
    assert any("PR#24462" in step for step in after.step_texts)
    # the verdict itself stands: the cause explains the held engine, it blames no one else
    assert (after.status, after.stage, after.culprits) == (
        before.status,
        before.stage,
        before.culprits,
    )


def test_one_tokenizer_worker_or_none_is_no_split() -> None:
    """A pause and a continue reach the same (only) worker: the engine is held by something else
    (the weight-update lock, a request never reaped), not by this bug."""
    assert RULE not in [f.rule for f in _verdict(_recorded()).findings]
    assert RULE not in [f.rule for f in _verdict(_with_workers(40001)).findings]
