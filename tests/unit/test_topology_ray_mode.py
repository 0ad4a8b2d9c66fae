"""SGLang's Ray mode (issue 35 item 3): the schedulers are Ray actors titled
`ray::SchedulerActor.run_event_loop`, children of the raylet, not `sglang::scheduler_*` children of
the engine's HTTP process. Recorded from real processes (tests/fixtures/real/sglang-ray-mode/: two
slime-shaped SGLangEngine actors, each spawning its HTTP server, which connects to Ray as a driver of
its own and creates two SchedulerActor actors as SGLang 0.5.23's RayEngine does, on a real local Ray
head, scanned by the doctor's own collector). The topology groups them as one engine's schedulers:
the actors the engine's HTTP process created are its own (their Ray job's driver is that
process)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slime_hangdoctor.parsers.processes import SPEC as PROCESSES
from slime_hangdoctor.parsers.pyspy import ALL_STACKS
from slime_hangdoctor.parsers.ray_state import RAY_STATE
from slime_hangdoctor.pipeline import analyse_bundle
from slime_hangdoctor.topology import RAY_SCHEDULER_NAME, SGLANG_RAY_ACTORS, MemberKind
from slime_hangdoctor.verdict import Role

BUNDLE = (
    Path(__file__).resolve().parents[1]
    / "fixtures"
    / "real"
    / "sglang-ray-mode"
    / "ray_mode.tar.gz"
)


@pytest.fixture(scope="module")
def analysed():  # type: ignore[no-untyped-def]
    return analyse_bundle(BUNDLE)


def _scheduler_actors(analysed):  # type: ignore[no-untyped-def]
    return [a for a in analysed.snapshot.joined(RAY_STATE).actors if a.class_name in SGLANG_RAY_ACTORS]


def test_the_recording_has_the_shape_sglang_ray_mode_runs(analysed) -> None:  # type: ignore[no-untyped-def]
    """Guard on the fixture: four scheduler actors titled by Ray after the method they run,
    children of the raylet (not of an engine's process), named as SGLang names them, two per job,
    each job's driver an engine's HTTP process (a child of an SGLangEngine actor)."""
    procs = {p.pid: p for o in analysed.snapshot.facts(PROCESSES) for p in o.fact}
    actors = _scheduler_actors(analysed)
    assert len(actors) == 4
    raylets = {procs[a.pid].ppid for a in actors}
    engines = {a.pid for a in analysed.snapshot.joined(RAY_STATE).actors if a.class_name == "SGLangEngine"}
    assert len(raylets) == 1 and raylets.isdisjoint({procs[e].pid for e in engines})
    for a in actors:
        assert procs[a.pid].title == "ray::SchedulerActor.run_event_loop"
        assert a.name is not None and RAY_SCHEDULER_NAME.fullmatch(a.name), a.name
    drivers = {j.job_id: j.driver_pid for j in analysed.snapshot.joined(RAY_STATE).jobs}
    servers = {drivers[a.job_id] for a in actors if a.job_id}
    assert len(servers) == 2 and all(procs[s].ppid in engines for s in servers)
    stacks = {s.pid for s in analysed.snapshot.joined(ALL_STACKS)}
    assert {a.pid for a in actors} <= stacks


def test_each_engines_scheduler_actors_are_its_schedulers(analysed) -> None:  # type: ignore[no-untyped-def]
    topo = analysed.topology
    actors = _scheduler_actors(analysed)
    drivers = {j.job_id: j.driver_pid for j in analysed.snapshot.joined(RAY_STATE).jobs}
    servers = {m.pid: m for m in topo.members if m.kind is MemberKind.HTTP_SERVER}
    assert len(topo.engines) == 2
    for a in actors:
        m = topo.member(a.pid)
        assert m is not None and m.role is Role.SGLANG_ENGINE and m.kind is MemberKind.SCHEDULER, m
        assert m.engine_url == servers[drivers[a.job_id]].engine_url  # type: ignore[index]
    by_url: dict[str | None, set[str]] = {}
    for a in actors:
        m = topo.member(a.pid)
        assert m is not None and a.name is not None
        match = RAY_SCHEDULER_NAME.fullmatch(a.name)
        assert match is not None
        by_url.setdefault(m.engine_url, set()).add(match["pg"])
    # one engine, one placement group of its own, both TP ranks
    assert len(by_url) == 2 and all(len(pgs) == 1 for pgs in by_url.values())


def test_the_engines_server_stays_the_engine_not_a_driver(analysed) -> None:  # type: ignore[no-untyped-def]
    """The engine's HTTP process is its own Ray job's driver: it is the engine's server, and the
    job's one driver is slime's (job.py)."""
    topo = analysed.topology
    drivers = topo.by_role(Role.DRIVER)
    assert [d.title.rsplit(" ", 1)[-1] for d in drivers] == ["job.py"]
    assert len([m for m in topo.members if m.kind is MemberKind.HTTP_SERVER]) == 2


def test_the_analysis_reads_each_engine_with_its_two_schedulers(analysed) -> None:  # type: ignore[no-untyped-def]
    from slime_hangdoctor.analysis.readers.sglang_http import read_engines
    from slime_hangdoctor.analysis.world import build_world

    world = build_world(analysed.snapshot, analysed.topology)
    engines = read_engines(world)
    assert len(engines) == 2
    for e in engines:
        assert len(e.schedulers) == 2 and e.server is not None and e.actor is not None
