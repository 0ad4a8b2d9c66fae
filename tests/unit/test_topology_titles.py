"""SGLang process titles -> kinds (item 9 of issue 18): every variant SGLang's setproctitle calls
write, read from the 0.5.15.post1 and 0.5.23 wheels (scheduler.py:4247-4262 / 6279-6294,
detokenizer_manager.py:489, multi_tokenizer_mixin.py:577 and 601, data_parallel_controller.py:671).

Provenance: the title strings of the first three tests are SGLang's own format strings from those
wheel lines, not recorded from a process: the demo's SGLang stand-in titles only
`sglang::scheduler_TP0` and `sglang::detokenizer` (as every recorded demo bundle shows), and
no GPU-less run produces the other variants. The process rows of the last two tests are recorded:
real processes titled as SGLang's entry points title themselves, read by the real process scan
(tests/fixtures/real/sglang-titles), and a demo bundle (tests/unit/recorded_shapes.py).
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from slime_hangdoctor.parsers.processes import parse_processes
from slime_hangdoctor.topology import build_topology, sglang_kind
from slime_hangdoctor.verdict import Role
from tests.unit import analysis_builders as ab
from tests.unit import recorded_shapes as rs
from tests.unit.analysis_builders import procs_obs, snapshot

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


def test_detokenizer_router_is_not_counted_as_the_detokenizer() -> None:
    """Recorded (real/sglang-titles): the real process scan of an engine's HTTP process and three
    children that titled themselves as SGLang's entry points do (`sglang::scheduler`,
    `sglang::detokenizer_router`, `sglang::tokenizer_worker:<own pid>`)."""
    pids = json.loads((TITLES / "pids.json").read_text())
    rows = parse_processes((TITLES / "processes.json").read_text())
    worker = next(r for r in rows if r.pid == pids["tokenizer_worker"])
    assert worker.cmdline[0] == f"sglang::tokenizer_worker:{worker.pid}"
    snap = snapshot(processes=(procs_obs(0, *rows),))
    kinds = {m.pid: m.kind for m in build_topology(snap).members}
    assert kinds[pids["scheduler"]] == "scheduler"
    assert kinds[pids["detokenizer_router"]] == "detokenizer_router"
    assert kinds[pids["tokenizer_worker"]] == "tokenizer_worker"


def test_a_child_of_a_train_rank_that_inherited_rank_is_not_another_rank() -> None:
    """The uploader a checkpoint is streamed to carries RANK and WORLD_SIZE too (a DataLoader
    worker would as well): it is not a third train rank, and the two ranks keep their numbers.
    The process rows of demo fault checkpoint_stuck_storage: ranks 22909 and 22966 (no RANK in
    their initial environment: slime sets it at run time), and rank 0's uploader 23066 (`sleep
    infinity`, RANK=0, WORLD_SIZE=2 inherited from the rank)."""
    stuck = rs.bundle("demo/checkpoint_stuck_storage")
    uploader = rs.process(stuck, 23066)
    assert uploader.env["RANK"] == "0" and uploader.env["WORLD_SIZE"] == "2"
    procs = (rs.process(stuck, 22909), rs.process(stuck, 22966), uploader)
    snap = ab.snapshot(processes=(ab.procs_obs(0, *procs),))
    ranks = {m.pid: m.rank for m in build_topology(snap).members if m.role is Role.TRAIN_RANK}
    assert ranks == {22909: 0, 22966: 1}
