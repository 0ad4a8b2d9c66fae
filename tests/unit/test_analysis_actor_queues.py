"""Actor queues, wait-for cycles, paused engines, overlong methods and placement waits, on recorded
bundles (provenance in tests/fixtures/README.md): demo `actor_queue_cycle` (the two engine actors'
`init_weights_update_group` each queued behind the other's, over both samples: slime PR#2331's
shape), demo2 `engine_paused_by_update` (every pause answered by a continue), demo
`rollout_slots_leaked` (`generate` running 24 s against earlier runs of under a second), demo
`placement_infeasible` (a PACK group of 4 GPU on a cluster without GPUs), GPU bundle
`gpu-h200-rank-killed` (a train rank SIGKILLed). A variant is the recording's own task pages with
tasks or samples left out, or marked truncated, filed back as answers by
`transforms.task_pages_replaced`."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from slime_hangdoctor.analysis.actor_queues import build_view
from slime_hangdoctor.analysis.diagnosis import diagnose
from slime_hangdoctor.analysis.parts.placement import findings as placement_findings
from slime_hangdoctor.analysis.parts.placement import placement_waits
from slime_hangdoctor.analysis.world import build_world
from slime_hangdoctor.bundle import open_bundle
from slime_hangdoctor.load import load_snapshot
from slime_hangdoctor.parsers.ray_state import RAY_STATE, TASK_RUNNING
from slime_hangdoctor.snapshot import Snapshot
from slime_hangdoctor.topology import build_topology
from slime_hangdoctor.verdict import Role, Status, Verdict
from tests.fixtures import transforms as tf

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
DEMO = FIXTURES / "analysis" / "demo"
CYCLE = DEMO / "actor_queue_cycle.tar.gz"
PAUSED_BY_UPDATE = FIXTURES / "analysis" / "demo2" / "engine_paused_by_update.tar.gz"


def _snap(path: Path) -> Snapshot:
    with open_bundle(path) as bundle:
        return load_snapshot(bundle)


def _verdict(snap: Snapshot) -> Verdict:
    return diagnose(snap, build_topology(snap)).verdict


def _without(snap: Snapshot, method: str) -> Snapshot:
    """The recording as if Ray had never run `method` (its tasks left out of every page)."""
    pages = tuple(
        dataclasses.replace(p, tasks=tuple(t for t in p.tasks if t.method != method))
        for p in snap.joined(RAY_STATE).task_pages
    )
    return tf.task_pages_replaced(snap, pages)


def test_queues_and_cycle_between_the_two_engines() -> None:
    view = build_view(_snap(CYCLE))
    assert view is not None
    engines = [q for q in view.queues if q.running and q.actor.class_name == "SGLangEngine"]
    assert len(engines) == 2
    assert all(q.running[0].method == "init_weights_update_group" for q in engines)
    assert all([t.method for t in q.queued] == ["init_weights_update_group"] for q in engines)
    (cycle,) = view.cycles
    assert {e.waiter for e in cycle} == {q.actor.actor_id for q in engines}
    assert all(e.holding.method == "init_weights_update_group" for e in cycle)


def test_cycle_needs_both_samples() -> None:
    snap = _snap(CYCLE)
    first = tuple(p for p in snap.joined(RAY_STATE).task_pages if p.sample == 0)
    view = build_view(tf.task_pages_replaced(snap, first))
    assert view is not None and view.edges and not view.cycles


def test_cycle_gone_when_a_holder_finished_between_samples() -> None:
    snap = _snap(CYCLE)
    first, *rest = snap.joined(RAY_STATE).task_pages
    assert first.sample == 0
    holder = next(
        t
        for t in first.tasks
        if t.state == TASK_RUNNING and t.method == "init_weights_update_group"
    )
    moved = dataclasses.replace(first, tasks=tuple(t for t in first.tasks if t is not holder))
    view = build_view(tf.task_pages_replaced(snap, (moved, *rest)))
    assert view is not None and not view.cycles


def test_engine_left_paused_only_without_a_later_continue() -> None:
    # In the recording every engine's pause_generation has its continue_generation after it.
    snap = _snap(PAUSED_BY_UPDATE)
    view = build_view(snap)
    assert view is not None and view.paused == ()
    # Without the continue_generation calls, each engine's last pause has none after it.
    view = build_view(_without(snap, "continue_generation"))
    assert view is not None and len(view.paused) == 2
    assert all(p.pause.method == "pause_generation" for p in view.paused)
    assert {p.actor.class_name for p in view.paused} == {"SGLangEngine"}
    rules = {f.rule for f in _verdict(_without(snap, "continue_generation")).findings}
    assert "ray_tasks.engine_paused" in rules
    assert "ray_tasks.engine_paused" not in {f.rule for f in _verdict(snap).findings}


def test_paused_check_skipped_on_a_truncated_history() -> None:
    snap = _snap(PAUSED_BY_UPDATE)
    pages = tuple(
        dataclasses.replace(p, truncated=p.target != "tasks_unfinished")
        for p in snap.joined(RAY_STATE).task_pages
    )
    view = build_view(_without(tf.task_pages_replaced(snap, pages), "continue_generation"))
    assert view is not None and view.paused == () and view.history_partial


def test_overlong_method_against_its_earlier_runs() -> None:
    view = build_view(_snap(DEMO / "rollout_slots_leaked.tar.gz"))
    assert view is not None
    (o,) = view.overlong
    assert o.task.method == "generate" and o.earlier_runs == 3 and o.elapsed_s > 20.0


def test_diagnosis_names_the_cycle_and_the_engines() -> None:
    v = _verdict(_snap(CYCLE))
    assert v.status is Status.HUNG
    assert {c.role for c in v.culprits} == {Role.SGLANG_ENGINE}
    assert "ray_tasks.wait_cycle" in {f.rule for f in v.findings}


def test_a_killed_actor_is_named_with_its_death_cause() -> None:
    v = _verdict(_snap(FIXTURES / "bundles" / "gpu-h200-rank-killed"))
    death = next(f for f in v.findings if f.rule == "ray_actor.death")
    assert "MegatronTrainRayActor 6e41acc2 (pid 3151) died" in death.message
    assert "WORKER_DIED" in death.message and "exit type SYSTEM_ERROR" in death.message


def test_without_task_pages_no_cycle_is_named() -> None:
    v = _verdict(tf.task_pages_replaced(_snap(CYCLE), ()))
    assert "ray_tasks.wait_cycle" not in {f.rule for f in v.findings}
    assert not any("cycle" in c.why for c in v.culprits)


def test_placement_group_needs_more_gpus_than_the_cluster_has() -> None:
    snap = _snap(DEMO / "placement_infeasible.tar.gz")
    world = build_world(snap, build_topology(snap))
    (w,) = placement_waits(world)
    assert w.infeasible and w.strategy == "PACK" and w.short == {"GPU": (4.0, 0.0)}
    (f,) = placement_findings(world)
    assert f.rule == "ray_placement.infeasible"
    assert "needs 4 GPU in one PACK group, cluster has 0" in f.message
