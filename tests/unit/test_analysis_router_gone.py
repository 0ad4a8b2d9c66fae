"""A router that is gone (issue 24 item 3, demo fault `router_killed`), on the recorded bundle
(tests/fixtures/analysis/demo/router_killed.tar.gz: the real sgl-router 0.3.2 forked by the demo's
RolloutManager as slime's `_start_router` does, SIGKILLed mid-rollout; the RolloutManager retries
`/generate`, the engines are idle) and on the same bundle as read once the RolloutManager had
reaped its zombie (`transforms.bundle_with_processes_reaped`)."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from slime_hangdoctor.parsers.log_heads import parse_log_head
from slime_hangdoctor.parsers.processes import SPEC as PROCESSES
from slime_hangdoctor.pipeline import analyse_bundle
from slime_hangdoctor.topology import argv_router
from slime_hangdoctor.verdict import Role, Stage, Status
from tests.fixtures import transforms as tf

BUNDLE = (
    Path(__file__).resolve().parents[1] / "fixtures" / "analysis" / "demo" / "router_killed.tar.gz"
)
RM_PID = 24085  # the RolloutManager, in the recording
ZOMBIE_PID = 24117  # its forked router, SIGKILLed: its zombie
ROUTER_URL = "http://127.0.0.1:3424"  # `Router launched at 127.0.0.1:3424` in the RM's log head
NODE = "192.0.2.2"


@pytest.fixture(scope="module")
def recorded():  # type: ignore[no-untyped-def]
    return analyse_bundle(BUNDLE)


@pytest.fixture(scope="module")
def reaped(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("reaped")
    with tarfile.open(BUNDLE) as tar:
        tar.extractall(root / "src", filter="data")
    copy = tf.bundle_with_processes_reaped(
        root / "src" / "bundle", root / "reaped", frozenset({ZOMBIE_PID})
    )
    return analyse_bundle(copy)


def test_the_recording_has_the_router_as_a_zombie_of_the_rollout_manager(recorded) -> None:  # type: ignore[no-untyped-def]
    """Guard on the fixture: what the kernel still tells of the killed router."""
    last = max(o.sample for o in recorded.snapshot.facts(PROCESSES))
    rows = {
        p.pid: p for o in recorded.snapshot.facts(PROCESSES) if o.sample == last for p in o.fact
    }
    zombie = rows[ZOMBIE_PID]
    assert (zombie.status, zombie.ppid, zombie.cmdline) == ("zombie", RM_PID, ())
    assert rows[RM_PID].title.startswith("ray::RolloutManager.generate")
    assert not any(p.listen_ports and 3424 in p.listen_ports for p in rows.values())


def test_the_rollout_managers_log_head_names_the_router_it_launched() -> None:
    with tarfile.open(BUNDLE) as tar:
        member = tar.extractfile(
            "bundle/raw/actor_log_head/192.0.2.2/RolloutManager-24085-out.s0.log"
        )
        assert member is not None
        head = parse_log_head(member.read())
    (router,) = head.routers
    assert router.url == ROUTER_URL and "Prometheus port" in router.line
    assert head.urls == ()  # not an engine URL


def test_the_zombie_is_the_router_in_the_topology(recorded) -> None:  # type: ignore[no-untyped-def]
    (router,) = recorded.topology.by_role(Role.ROUTER)
    assert (router.pid, router.parent_pid, router.engine_url) == (ZOMBIE_PID, RM_PID, ROUTER_URL)
    assert recorded.topology.routers == (ROUTER_URL,)


def test_a_killed_router_is_the_culprit_with_its_zombies_pid(recorded) -> None:  # type: ignore[no-untyped-def]
    v = recorded.diagnosis.verdict
    assert (v.status, v.stage) == (Status.HUNG, Stage.ROLLOUT_DISPATCH), v.summary
    top = v.culprits[0]
    assert (top.role, top.pid, top.node_ip, top.engine_url) == (
        Role.ROUTER,
        ZOMBIE_PID,
        NODE,
        ROUTER_URL,
    )
    assert "is a zombie (state Z)" in top.why and f"rollout manager (pid {RM_PID})" in top.why
    gone = next(f for f in v.findings if f.rule == "router-gone")
    assert "Router launched at 127.0.0.1:3424" in gone.evidence[0]
    assert any(s.startswith("dmesg") and str(ZOMBIE_PID) in s for s in v.step_texts)
    assert not any(s.startswith(f"py-spy dump --pid {ZOMBIE_PID}") for s in v.step_texts)


def test_a_reaped_router_names_the_rollout_manager_that_launched_it(reaped) -> None:  # type: ignore[no-untyped-def]
    assert reaped.topology.by_role(Role.ROUTER) == ()
    assert reaped.topology.routers == (ROUTER_URL,)  # still probed: the log head names it
    v = reaped.diagnosis.verdict
    assert (v.status, v.stage) == (Status.HUNG, Stage.ROLLOUT_DISPATCH), v.summary
    top = v.culprits[0]
    assert (top.role, top.pid, top.node_ip, top.engine_url) == (
        Role.ROUTER,
        RM_PID,
        NODE,
        ROUTER_URL,
    )
    assert "exited and been reaped" in top.why and "launched it" in top.why
    assert any(r.rule == "router-gone" for r in v.findings)


def test_a_router_the_user_gives_is_read_from_slimes_flags() -> None:
    # slime's own flags (slime/utils/arguments.py; docs/en/get_started/usage.md: "slime will not
    # start an internal router")
    argv = (
        "python3",
        "train.py",
        "--sglang-router-ip",
        "10.0.0.5",
        "--sglang-router-port",
        "30000",
    )
    assert argv_router(argv) == "http://10.0.0.5:30000"
    assert argv_router(
        ("train.py", "--sglang-router-ip=fd00::5", "--sglang-router-port=30000")
    ) == ("http://[fd00::5]:30000")
    assert argv_router(("train.py", "--sglang-router-ip", "10.0.0.5")) is None  # no port
    assert (
        argv_router(("train.py", "--sglang-router-port", "99999", "--sglang-router-ip", "h"))
        is None
    )


def test_two_zombie_children_for_one_router_are_not_guessed(recorded) -> None:  # type: ignore[no-untyped-def]
    """The recorded zombie's row also read at another pid (`transforms.process_relabelled`, its
    parent kept): the RolloutManager has two zombie children for the one router its log names.
    Which one was the router cannot be told: none is taken for it, and the culprit names the
    RolloutManager that launched it, saying why."""
    import dataclasses

    from slime_hangdoctor.analysis.diagnosis import diagnose
    from slime_hangdoctor.topology import build_topology

    other = ZOMBIE_PID + 1000

    def with_second(obs):  # type: ignore[no-untyped-def]
        if obs.source != PROCESSES.name:
            return obs
        zombie = next(p for p in obs.fact if p.pid == ZOMBIE_PID)
        twin = tf.process_relabelled(zombie, pid=other, ppid=RM_PID, node_ip=zombie.node_ip)
        return dataclasses.replace(obs, fact=(*obs.fact, twin))

    snap = dataclasses.replace(
        recorded.snapshot, observed=tuple(with_second(o) for o in recorded.snapshot.observed)
    )
    topo = build_topology(snap)
    assert topo.by_role(Role.ROUTER) == () and topo.routers == (ROUTER_URL,)
    top = diagnose(snap, topo).verdict.culprits[0]
    assert (top.role, top.pid, top.engine_url) == (Role.ROUTER, RM_PID, ROUTER_URL)
    assert f"2 zombie children ({ZOMBIE_PID}, {other})" in top.why
