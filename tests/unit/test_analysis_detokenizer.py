"""Issue 21 (7), sglang#36333 / #40809: an engine's `sglang::detokenizer` stops inside one output
batch; its heartbeat stops (SGLang's `/health` turns 503: "couldn't get a response from
detokenizer"), the scheduler finishes the requests and goes idle, their outputs never reach the HTTP
process, and the rollout waits on them.

The doctor does not read `/health` (docs/probes.md); what it reads is the detokenizer's stack, held
in the same batch in both samples and not back at its receive (0.5.15.post1 detokenizer_manager.py
:161-169 `event_loop` -> `sock_recv`), beside `/generate` requests at the HTTP layer and the router
that the scheduler (`/v1/loads`) no longer holds. Stacks and bodies recorded from demo fault
`engine_detokenizer_stalled` (tests/fixtures/README.md)."""

from __future__ import annotations

import tarfile
from pathlib import Path

from slime_hangdoctor.analysis.readers.sglang_http import EngineRead, EngineState, read_engines
from slime_hangdoctor.analysis.world import build_world
from slime_hangdoctor.pipeline import Analysed, analyse_bundle
from slime_hangdoctor.verdict import Role, Stage, Status
from tests.fixtures import transforms as tf
from tests.unit.demo_bundles import recorded_main_thread

BUNDLE = (
    Path(__file__).resolve().parents[1] / "fixtures/analysis/demo/engine_detokenizer_stalled.tar.gz"
)
ENGINE_1 = "http://127.0.0.1:23798"
PIDS = {
    "engine 0 detokenizer": 7825,  # idle: in sock_recv under its event_loop
    "engine 1 server": 7822,
    "engine 1 scheduler": 7833,
    "engine 1 detokenizer": 7834,  # held in _decode_batch_token_id_output
}


def _engines(result: Analysed) -> dict[str, EngineRead]:
    world = build_world(result.snapshot, result.topology)
    return {e.url: e for e in read_engines(world)}


def _frames(label: str, sample: int) -> list[str]:
    return [f.name for f in recorded_main_thread(BUNDLE, PIDS[label], sample).frames]


def test_the_recorded_detokenizers() -> None:
    for sample in (0, 1):
        held = _frames("engine 1 detokenizer", sample)
        assert "DetokenizerManager._decode_batch_token_id_output" in held
        assert "DetokenizerManager.event_loop" in held
        assert "sock_recv" not in held
        idle = _frames("engine 0 detokenizer", sample)
        assert idle.index("sock_recv") + 1 == idle.index("DetokenizerManager.event_loop")


def test_the_engine_is_stuck_in_its_detokenizer_and_the_verdict_names_it() -> None:
    result = analyse_bundle(BUNDLE)
    verdict = result.diagnosis.verdict
    assert verdict.status is Status.HUNG
    assert verdict.stage is Stage.ROLLOUT_DISPATCH
    assert [(c.role, c.pid, c.engine_url) for c in verdict.culprits] == [
        (Role.SGLANG_ENGINE, PIDS["engine 1 detokenizer"], ENGINE_1)
    ]
    assert "sglang::detokenizer" in verdict.summary
    assert "wait before the scheduler" not in " ".join(
        e for f in verdict.findings for e in f.evidence
    )
    engines = _engines(result)
    assert engines[ENGINE_1].state is EngineState.STUCK
    assert engines[ENGINE_1].detokenizer_stalled
    assert not any(e.detokenizer_stalled for u, e in engines.items() if u != ENGINE_1)


def test_without_the_detokenizer_stacks_the_engine_only_holds_requests(tmp_path: Path) -> None:
    """The detokenizer's stack is what tells where the requests stop: without it the same bodies
    read as requests held before the scheduler, and the HTTP process is named."""
    with tarfile.open(BUNDLE) as tar:
        tar.extractall(tmp_path / "src", filter="data")
    src = next(p.parent for p in (tmp_path / "src").rglob("manifest.json"))
    cut = tf.bundle_without_targets(
        src, tmp_path / "cut", "pyspy", (f"pid{PIDS['engine 1 detokenizer']}",)
    )
    result = analyse_bundle(cut)
    engines = _engines(result)
    assert engines[ENGINE_1].state is EngineState.HELD
    assert not engines[ENGINE_1].detokenizer_stalled
    verdict = result.diagnosis.verdict
    assert [(c.role, c.pid) for c in verdict.culprits] == [
        (Role.SGLANG_ENGINE, PIDS["engine 1 server"])
    ]
