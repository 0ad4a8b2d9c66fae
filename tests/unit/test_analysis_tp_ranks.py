"""Issue 21 (7), sglang#30760: one TP rank of an engine stuck in HiCache's prefetch-check
`all_reduce` while its other TP ranks wait in `broadcast_pyobj <- recv_requests`.

SGLang's TP ranks other than 0 wait in `broadcast_pyobj` (a blocking `dist.broadcast`, torch's frame
innermost) for rank 0's next request list; py-spy shows them in a collective. They wait for rank 0:
the rank that is in another collective is the one to name, with its stage. Stacks recorded from demo
fault `rollout_tp_rank_prefetch_stuck` (engines with 2 TP ranks; tests/fixtures/README.md)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from slime_hangdoctor.analysis.readers.pyspy import read_thread
from slime_hangdoctor.analysis.signatures import Block
from slime_hangdoctor.parsers.pyspy import ThreadStack
from slime_hangdoctor.pipeline import analyse_bundle
from slime_hangdoctor.verdict import Role, Stage, Status
from tests.fixtures import transforms as tf
from tests.unit.demo_bundles import recorded_main_thread

BUNDLE = (
    Path(__file__).resolve().parents[1]
    / "fixtures/analysis/demo/rollout_tp_rank_prefetch_stuck.tar.gz"
)
PIDS = {
    "engine 0 scheduler TP1": 24230,  # idle engine: in broadcast_pyobj between batches
    "engine 1 server": 24227,
    "engine 1 scheduler": 24238,  # TP0: all_reduce <- can_terminate_prefetch <- check_prefetch_...
    "engine 1 scheduler TP1": 24240,  # broadcast <- broadcast_pyobj <- recv_requests
}
NAMES = [pytest.param(False, id="qualnames"), pytest.param(True, id="bare-names")]


def _thread(label: str, bare: bool, sample: int = 0) -> ThreadStack:
    thread = recorded_main_thread(BUNDLE, PIDS[label], sample)
    if bare:  # py-spy on Python < 3.11 names frames by co_name
        thread = dataclasses.replace(thread, frames=tf.bare_frame_names(thread.frames))
    return thread


@pytest.mark.parametrize("bare", NAMES)
@pytest.mark.parametrize("label", ["engine 1 scheduler TP1", "engine 0 scheduler TP1"])
def test_a_tp_rank_in_broadcast_pyobj_waits_for_its_rank_0(label: str, bare: bool) -> None:
    thread = _thread(label, bare)
    assert thread.frames[0].name == "broadcast"  # torch's collective innermost, as py-spy shows
    read = read_thread(thread, PIDS[label])
    assert read.in_intake, read.describe()
    assert not read.in_collective
    assert read.block is Block.EVENT_LOOP
    assert read.block_frame is not None and read.block_frame.name == "broadcast_pyobj"
    assert "TP rank 0's next requests" in read.describe()


@pytest.mark.parametrize("bare", NAMES)
def test_the_rank_in_the_prefetch_check_is_in_a_collective_at_rollout_dispatch(
    bare: bool,
) -> None:
    thread = _thread("engine 1 scheduler", bare)
    read = read_thread(thread, PIDS["engine 1 scheduler"])
    assert read.in_collective and not read.in_intake, read.describe()
    assert read.stage is Stage.ROLLOUT_DISPATCH
    assert read.stage_frame is not None
    assert read.stage_frame.name.endswith("can_terminate_prefetch")


def test_the_verdict_names_the_rank_the_others_wait_for() -> None:
    verdict = analyse_bundle(BUNDLE).diagnosis.verdict
    assert verdict.status is Status.HUNG
    assert verdict.stage is Stage.ROLLOUT_DISPATCH
    assert [(c.role, c.pid) for c in verdict.culprits] == [
        (Role.SGLANG_ENGINE, PIDS["engine 1 scheduler"])
    ]
    assert "broadcast_pyobj" in verdict.summary and "all_reduce" in verdict.summary
    assert f"pid {PIDS['engine 1 scheduler TP1']}" in verdict.summary  # the rank that waits
