"""slime's router is a fork of the RolloutManager (issue 21 item 1): recorded from a real Ray job
(tests/fixtures/real/router-fork/: the real sgl-router 0.3.2 forked from `RolloutManager.__init__`
exactly as slime's `_start_router` does, the rollout hung a minute later on a service that never
answers). The child keeps the title `ray::RolloutManager.__init__`, the actor's environment and
every frame of the constructor below `BaseProcess._bootstrap`."""

from __future__ import annotations

from pathlib import Path

import pytest

from slime_hangdoctor.analysis.diagnosis import startup_chain
from slime_hangdoctor.analysis.readers.pyspy import own_frames, read_process
from slime_hangdoctor.analysis.world import build_world
from slime_hangdoctor.parsers.processes import SPEC as PROCESSES
from slime_hangdoctor.parsers.pyspy import ALL_STACKS
from slime_hangdoctor.pipeline import analyse_bundle
from slime_hangdoctor.verdict import Role, Stage, Status

BUNDLE = (
    Path(__file__).resolve().parents[1] / "fixtures" / "real" / "router-fork" / "router_fork.tar.gz"
)
ROUTER_PID = 23556  # the forked child, in the recording
RM_PID = 23510


@pytest.fixture(scope="module")
def analysed():  # type: ignore[no-untyped-def]
    return analyse_bundle(BUNDLE)


def test_the_recording_has_the_shape_slime_runs(analysed) -> None:  # type: ignore[no-untyped-def]
    """Guard on the fixture itself: the child kept the actor's title and the constructor's frames."""
    procs = {p.pid: p for o in analysed.snapshot.facts(PROCESSES) for p in o.fact}
    assert procs[ROUTER_PID].title == "ray::RolloutManager.__init__"
    assert procs[ROUTER_PID].ppid == RM_PID
    stack = next(s for s in analysed.snapshot.joined(ALL_STACKS) if s.pid == ROUTER_PID)
    names = [f.name for f in stack.stack.threads[0].frames]
    assert "RolloutManager.__init__" in names and "launch_router" in names


def test_the_router_child_is_the_router_not_a_second_rollout_manager(analysed) -> None:  # type: ignore[no-untyped-def]
    topo = analysed.topology
    assert [m.pid for m in topo.by_role(Role.ROLLOUT_MANAGER)] == [RM_PID]
    (router,) = topo.by_role(Role.ROUTER)
    assert router.pid == ROUTER_PID
    # its own port, not the Ray worker's gRPC port it inherited across the fork (`[::]:13999`)
    assert router.engine_url == "http://127.0.0.1:33941"
    assert topo.routers == ("http://127.0.0.1:33941",)


def test_inherited_constructor_frames_tell_no_stage(analysed) -> None:  # type: ignore[no-untyped-def]
    stack = next(s for s in analysed.snapshot.joined(ALL_STACKS) if s.pid == ROUTER_PID)
    frames = stack.stack.threads[0].frames
    own = own_frames(frames)
    assert own[-1].name == "BaseProcess._bootstrap"
    assert "RolloutManager.__init__" not in [f.name for f in own]
    read = read_process(stack)
    assert read is not None and read.stage is None


def test_the_hang_keeps_its_stage(analysed) -> None:  # type: ignore[no-untyped-def]
    world = build_world(analysed.snapshot, analysed.topology)
    assert startup_chain(world) == ()
    v = analysed.diagnosis.verdict
    assert v.status is Status.HUNG
    assert v.stage is Stage.ROLLOUT_DISPATCH
    assert [c.pid for c in v.culprits] == [RM_PID]
