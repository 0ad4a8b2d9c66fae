"""SGLang process titles -> kinds (item 9 of issue 18): every variant SGLang's setproctitle calls
write, read from the 0.5.15.post1 and 0.5.23 wheels (scheduler.py:4247-4262 / 6279-6294,
detokenizer_manager.py:489, multi_tokenizer_mixin.py:577 and 601, data_parallel_controller.py:671).

Provenance: the title strings of the first three tests are SGLang's own format strings from those
wheel lines, not recorded from a process: the demo's SGLang stand-in titles only
`sglang::scheduler_TP0` and `sglang::detokenizer` (as every recorded demo bundle shows), and
no GPU-less run produces the other variants. The process rows of the last two tests are recorded:
real processes titled as SGLang's entry points title themselves, read by the real process scan
(tests/fixtures/real/sglang-titles) and filed in a bundle by the product's BundleWriter
(`transforms.bundle_of_captures`), and a recorded demo bundle reduced to its process scans of the
two ranks and the uploader (`bundle_without_sources`, `bundle_with_processes_reaped`); both read
by the real loader.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from slime_hangdoctor.bundle import open_bundle
from slime_hangdoctor.load import load_snapshot
from slime_hangdoctor.parsers.processes import parse_processes
from slime_hangdoctor.snapshot import Snapshot
from slime_hangdoctor.topology import build_topology, sglang_kind
from slime_hangdoctor.verdict import Role
from tests.fixtures import transforms as tf
from tests.unit import recorded_shapes as rs

TITLES = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "sglang-titles"

# The suffix parts in SGLang's order; each present only when its dimension is in use
# (DP when a dp rank is set, PP when pp>1, ATTN_CP when attn_cp>1, MOE_DP when moe_dp>1,
# TP when tp>1, EP when ep>1).
_PARTS = ("DP1", "PP0", "ATTN_CP1", "MOE_DP0", "TP3", "EP2")
SCHEDULER_TITLES = [
    "sglang::scheduler" + "".join(f"_{p}" for p in combo)
    for n in range(len(_PARTS) + 1)
    for combo in itertools.combinations(_PARTS, n)
]


def test_every_scheduler_title_variant_is_a_scheduler() -> None:
    assert "sglang::scheduler" in SCHEDULER_TITLES  # tp=1, no DP: no suffix at all
    assert "sglang::scheduler_DP1_PP0_ATTN_CP1_MOE_DP0_TP3_EP2" in SCHEDULER_TITLES
    assert len(SCHEDULER_TITLES) == 64
    for title in SCHEDULER_TITLES:
        assert sglang_kind(title) == "scheduler", title


@pytest.mark.parametrize(
    ("title", "kind"),
    [
        ("sglang::detokenizer", "detokenizer"),
        ("sglang::detokenizer_router", "detokenizer_router"),  # not a detokenizer
        ("sglang::data_parallel_controller", "data_parallel_controller"),
        ("sglang::tokenizer_worker:4242", "tokenizer_worker"),
        ("sglang::scheduler_TP0_DP0", "scheduler"),  # another order: still SGLang's own prefix test
        ("sglang::something_new", "sglang_helper"),
        ("ray::SGLangEngine.init", None),
        ("python3 -m sglang.launch_server", None),
    ],
)
def test_other_sglang_titles(title: str, kind: str | None) -> None:
    assert sglang_kind(title) == kind


def _loaded(path: Path) -> Snapshot:
    with open_bundle(path) as opened:
        return load_snapshot(opened)


def test_detokenizer_router_is_not_counted_as_the_detokenizer(tmp_path: Path) -> None:
    """Recorded (real/sglang-titles): the real process scan of an engine's HTTP process and three
    children that titled themselves as SGLang's entry points do (`sglang::scheduler`,
    `sglang::detokenizer_router`, `sglang::tokenizer_worker:<own pid>`)."""
    pids = json.loads((TITLES / "pids.json").read_text())
    scan = (TITLES / "processes.json").read_text()
    rows = parse_processes(scan)
    worker = next(r for r in rows if r.pid == pids["tokenizer_worker"])
    assert worker.cmdline[0] == f"sglang::tokenizer_worker:{worker.pid}"
    snap = _loaded(tf.bundle_of_captures(tmp_path / "b", scan))
    kinds = {m.pid: m.kind for m in build_topology(snap).members}
    assert kinds[pids["scheduler"]] == "scheduler"
    assert kinds[pids["detokenizer_router"]] == "detokenizer_router"
    assert kinds[pids["tokenizer_worker"]] == "tokenizer_worker"


def test_a_child_of_a_train_rank_that_inherited_rank_is_not_another_rank(tmp_path: Path) -> None:
    """The uploader a checkpoint is streamed to carries RANK and WORLD_SIZE too (a DataLoader
    worker would as well): it is not a third train rank, and the two ranks keep their numbers.
    The process rows of demo fault checkpoint_stuck_storage: ranks 22909 and 22966 (no RANK in
    their initial environment: slime sets it at run time), and rank 0's uploader 23066 (`sleep
    infinity`, RANK=0, WORLD_SIZE=2 inherited from the rank)."""
    stuck = rs.bundle("demo/checkpoint_stuck_storage")
    uploader = rs.process(stuck, 23066)
    assert uploader.env["RANK"] == "0" and uploader.env["WORLD_SIZE"] == "2"
    with open_bundle(stuck) as opened:
        sources = {r.source for r in opened.records()} - {"processes"}
        only = tf.bundle_without_sources(opened.root, tmp_path / "scans", frozenset(sources))
        scans = rs.recorded(stuck)
        seen = {p.pid for s in (0, 1) for p in scans.processes_at(s)}
        others = seen - {22909, 22966, 23066}
    snap = _loaded(tf.bundle_with_processes_reaped(only, tmp_path / "b", frozenset(others)))
    ranks = {m.pid: m.rank for m in build_topology(snap).members if m.role is Role.TRAIN_RANK}
    assert ranks == {22909: 0, 22966: 1}
