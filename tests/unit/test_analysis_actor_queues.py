"""Actor queues, wait-for cycles, paused engines, overlong methods and placement waits, on the real
Ray 2.60 answers of tests/fixtures/real/local-cpu-ray-2.60-actor-queues (two engine actors whose
init_group each call join_group on the other: a cycle; engine e0 paused, continued, paused again;
a dead actor; an 8-GPU PACK placement group on a cluster without GPUs)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from slime_hangdoctor.analysis.actor_queues import build_view
from slime_hangdoctor.analysis.diagnosis import diagnose
from slime_hangdoctor.analysis.parts.placement import findings as placement_findings
from slime_hangdoctor.analysis.parts.placement import placement_waits
from slime_hangdoctor.analysis.world import build_world
from slime_hangdoctor.parsers import ray_state
from slime_hangdoctor.parsers.ray_state import RAY_STATE, RayJob, RayTask, TaskPageObs
from slime_hangdoctor.snapshot import Snapshot
from tests.fixtures import transforms as tf
from tests.unit.analysis_builders import snapshot, topology

REAL = Path(__file__).parent.parent / "fixtures" / "real" / "local-cpu-ray-2.60-actor-queues"
JOB = RayJob("02000000", "x1", "RUNNING", "python drv.py", None, None)


def _tasks() -> tuple[RayTask, ...]:
    return ray_state.parse_task_page((REAL / "tasks.json").read_bytes()).tasks


def _snap(
    samples: tuple[int, ...] = (0, 1), history: bool = True, window_s: float = 3.0, **kw: object
) -> Snapshot:
    """The real answer as the unfinished page of each sample (nothing moved in between) and, at
    the last sample, as the job's history page."""
    tasks = _tasks()
    unfinished = tuple(t for t in tasks if t.state not in ("FINISHED", "FAILED"))
    end = max(t.end_time_ms or t.start_time_ms or 0 for t in tasks) / 1000.0
    pages = [TaskPageObs("tasks_unfinished", s, end + window_s * s, unfinished) for s in samples]
    if history:
        pages.append(
            TaskPageObs("tasks_job_02000000", samples[-1], end + window_s * samples[-1], tasks)
        )
    return snapshot(
        actors=ray_state.parse_actors((REAL / "actors.json").read_bytes()),
        jobs=(JOB,),
        task_pages=tuple(pages),
        **kw,
    )


def test_queues_and_cycle_between_the_two_engines() -> None:
    view = build_view(_snap())
    assert view is not None
    busy = [q for q in view.queues if q.running]
    assert len(busy) == 2
    assert all(q.running[0].method == "init_group" for q in busy)
    assert all([t.method for t in q.queued] == ["join_group"] for q in busy)
    (cycle,) = view.cycles
    assert {e.waiter for e in cycle} == {q.actor.actor_id for q in busy}
    assert all(e.kind == "child" and e.holding.method == "init_group" for e in cycle)


def test_cycle_needs_both_samples() -> None:
    view = build_view(_snap(samples=(0,)))
    assert view is not None and view.edges and not view.cycles


def test_cycle_gone_when_a_holder_finished_between_samples() -> None:
    snap = _snap()
    first, *rest = snap.joined(RAY_STATE).task_pages
    running = next(t for t in first.tasks if t.state == "RUNNING")
    moved = dataclasses.replace(first, tasks=tuple(t for t in first.tasks if t is not running))
    view = build_view(tf.task_pages_replaced(snap, (moved, *rest)))
    assert view is not None and not view.cycles


def _without(snap: Snapshot, method: str) -> Snapshot:
    pages = tuple(
        dataclasses.replace(p, tasks=tuple(t for t in p.tasks if t.method != method))
        for p in snap.joined(RAY_STATE).task_pages
    )
    return tf.task_pages_replaced(snap, pages)


def test_engine_left_paused_only_without_a_later_continue() -> None:
    # In the capture, e0's last pause and its continue were created in the same millisecond:
    # the order is unknown, so the engine is not called paused.
    view = build_view(_snap())
    assert view is not None and view.paused == ()
    # Without the continue_generation call, e0's last pause_generation has none after it.
    view = build_view(_without(_snap(), "continue_generation"))
    assert view is not None
    (paused,) = view.paused
    assert paused.actor.name == "e0" and paused.pause.method == "pause_generation"


def test_paused_check_skipped_on_a_truncated_history() -> None:
    snap = _snap()
    pages = tuple(
        dataclasses.replace(p, truncated=p.target != "tasks_unfinished")
        for p in snap.joined(RAY_STATE).task_pages
    )
    view = build_view(_without(tf.task_pages_replaced(snap, pages), "continue_generation"))
    assert view is not None and view.paused == () and view.history_partial


def test_overlong_method_against_its_earlier_runs() -> None:
    snap = _snap(window_s=20.0)
    tasks = _tasks()
    join = [t for t in tasks if t.method == "set_peer"]  # two finished runs of a few ms
    running = next(t for t in tasks if t.state == "RUNNING")
    slow = dataclasses.replace(running, name=join[0].name, actor_id=join[0].actor_id)
    pages = tuple(
        dataclasses.replace(
            p, tasks=tuple(slow if t.task_id == running.task_id else t for t in p.tasks)
        )
        for p in snap.joined(RAY_STATE).task_pages
    )
    view = build_view(tf.task_pages_replaced(snap, pages))
    assert view is not None
    (o,) = view.overlong
    assert o.task.method == "set_peer" and o.earlier_runs == 2 and o.elapsed_s > 5.0


def test_diagnosis_names_the_cycle_and_the_engines() -> None:
    d = diagnose(_without(_snap(), "continue_generation"), topology()).verdict
    assert d.status.value == "hung"
    assert {c.role.value for c in d.culprits} == {"sglang_engine"}
    rules = {f.rule for f in d.findings}
    assert {"ray_tasks.wait_cycle", "ray_tasks.engine_paused", "ray_actor.death"} <= rules
    death = next(f for f in d.findings if f.rule == "ray_actor.death")
    assert "WORKER_DIED" in death.message and "SYSTEM_ERROR" in death.message


def test_without_task_pages_no_cycle_is_named() -> None:
    snap = tf.task_pages_replaced(_snap(), ())
    d = diagnose(snap, topology()).verdict
    assert "ray_tasks.wait_cycle" not in {f.rule for f in d.findings}
    assert not any("cycle" in c.why for c in d.culprits)


def test_placement_group_needs_more_gpus_than_the_cluster_has() -> None:
    snap = _snap(
        placement_groups=ray_state.parse_placement_groups(
            (REAL / "placement_groups.json").read_bytes()
        ),
        cluster=ray_state.parse_cluster_status((REAL / "cluster_status.json").read_bytes()),
    )
    world = build_world(snap, topology())
    (w,) = placement_waits(world)
    assert w.infeasible and w.strategy == "PACK" and w.short == {"GPU": (8.0, 0.0)}
    (f,) = placement_findings(world)
    assert f.rule == "ray_placement.infeasible"
    assert "needs 8 GPU in one PACK group, cluster has 0" in f.message
