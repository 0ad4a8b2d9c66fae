"""Issue 21 (2): an SGLang scheduler that waits in the weight broadcast shows no `broadcast` frame.

SGLang 0.5.15.post1 (`model_runner.py` 2095-2113) posts every `broadcast(async_op=True)` and waits in
`handle.wait()`, native code: the scheduler's innermost Python frame is
`ModelRunner.update_weights_from_distributed`, idle, with `c10d::Work::wait` below it under --native.
Stacks recorded from demo fault `weight_sync_engine_wedged` (the stand-in does what the wheel does),
plain and --native, from the same hang (tests/fixtures/README.md; pids in demo_bundles.py).
"""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from slime_hangdoctor.analysis.readers.pyspy import read_thread
from slime_hangdoctor.analysis.signatures import Block
from slime_hangdoctor.pipeline import analyse_bundle
from slime_hangdoctor.verdict import Role, Stage, Status
from tests.fixtures import transforms as tf
from tests.unit.demo_bundles import WEDGED_PIDS, recorded_main_thread, wedged_bundle

KINDS = [pytest.param(False, id="plain"), pytest.param(True, id="native")]


@pytest.mark.parametrize("native", KINDS)
def test_a_scheduler_waiting_on_its_broadcast_handles_is_in_the_collective(native: bool) -> None:
    pid = WEDGED_PIDS["engine 0 scheduler"]
    thread = recorded_main_thread(wedged_bundle(native), pid)
    assert not any(f.name.endswith("broadcast") for f in thread.frames)  # as the issue says
    read = read_thread(thread, pid)
    assert read.block is Block.COLLECTIVE, read.describe()
    assert read.in_collective
    assert read.stage is Stage.NCCL_BROADCAST
    top = read.top
    assert top is not None and top.name == "ModelRunner.update_weights_from_distributed"
    if not native:  # the handle-wait line itself decides
        assert read.block_frame is top, read.describe()


@pytest.mark.parametrize("native", KINDS)
def test_a_scheduler_wedged_inside_the_update_is_not_in_the_collective(native: bool) -> None:
    """The same function deeper in the stack (the engine wedged in something it calls, here the
    stand-in's `_synchronize` sleep) is not a wait in the broadcast."""
    pid = WEDGED_PIDS["engine 1 scheduler"]
    thread = recorded_main_thread(wedged_bundle(native), pid)
    assert any(f.name == "ModelRunner.update_weights_from_distributed" for f in thread.frames)
    read = read_thread(thread, pid)
    assert not read.in_collective, read.describe()
    assert read.stage is Stage.NCCL_BROADCAST


def _without_trainer_stacks(native: bool, tmp: Path) -> Path:
    with tarfile.open(wedged_bundle(native)) as tar:
        tar.extractall(tmp / "src", filter="data")
    src = next(p.parent for p in (tmp / "src").rglob("manifest.json"))
    trainers = tuple(f"pid{WEDGED_PIDS[k]}" for k in ("train rank 0", "train rank 1"))
    return tf.bundle_without_targets(src, tmp / "cut", "pyspy", trainers)


@pytest.mark.parametrize("native", KINDS)
@pytest.mark.parametrize("trainer_stacks", [True, False])
def test_the_wedged_engine_alone_is_the_culprit_of_the_recorded_broadcast(
    native: bool, trainer_stacks: bool, tmp_path: Path
) -> None:
    """Both engines' schedulers time out; engine 0's waits on its broadcast handles, engine 1's is
    wedged outside the broadcast. Engine 1 alone is the culprit, with the trainers' stacks (they wait
    in the broadcast / barrier) and without them (the engines compared with each other, as when
    the trainers sit on another node or, with NCCL, have left `handle.wait()` for `ray.get`)."""
    path = wedged_bundle(native) if trainer_stacks else _without_trainer_stacks(native, tmp_path)
    analysed = analyse_bundle(path)
    v = analysed.diagnosis.verdict
    assert v.status is Status.HUNG
    assert v.stage is Stage.NCCL_BROADCAST, v.summary
    url = {m.pid: m.engine_url for m in analysed.topology.members if m.kind == "scheduler"}
    wedged, waiting = (url[WEDGED_PIDS[f"engine {i} scheduler"]] for i in (1, 0))
    assert wedged and waiting and wedged != waiting
    assert {c.engine_url for c in v.culprits} == {wedged}, v.summary
    assert all(c.role is Role.SGLANG_ENGINE for c in v.culprits)
