"""Who waits for whom (analysis/waits.py), on recorded demo bundles: each kind of wait the
analysis finds, between the processes the recordings show, and none on a job that progresses.
The pids are those of the recordings (tests/fixtures/analysis/*)."""

from __future__ import annotations

import json
from pathlib import Path

from slime_hangdoctor.render.jsonout import report_json
from slime_hangdoctor.verdict import Diagnosis, WaitKind
from tests.unit.demo_bundles import DEMO, diagnosed

ROUTER = DEMO.parent / "router"


def _edges(d: Diagnosis) -> set[tuple[int | None, str, int | None]]:
    return {(w.waiter.pid, w.kind.value, w.waited_for.pid) for w in d.waits}


def test_a_weight_broadcast_hang_has_ray_calls_http_and_the_collective_on_the_culprit() -> None:
    d = diagnosed(DEMO / "weight_sync_health_check_queued.tar.gz")
    edges = _edges(d)
    # the driver waits in ray.get on both ranks' update_weights; rank 0 called both engines
    assert {(16147, "ray_call", 16448), (16147, "ray_call", 16370)} <= edges
    assert {(16370, "ray_call", 16229), (16370, "ray_call", 16228)} <= edges
    # each engine's actor waits on its own HTTP server
    assert {(16229, "http_request", 16316), (16228, "http_request", 16313)} <= edges
    # the ranks (and engine 1's scheduler) wait in the broadcast for the culprit engine's scheduler
    assert {(16448, "collective", 16323), (16370, "collective", 16323)} <= edges
    assert d.verdict.culprits[0].engine_url == "http://127.0.0.1:32137"
    for w in d.waits:
        assert w.evidence and all(line.startswith("[") for line in w.evidence)


def test_a_rank_waiting_for_its_forked_writer_is_a_child_wait() -> None:
    d = diagnosed(DEMO / "checkpoint_writer_deadlock.tar.gz")
    child = [w for w in d.waits if w.kind is WaitKind.CHILD]
    assert [(w.waiter.label, w.waited_for.pid) for w in child] == [("train rank 0", 28605)]
    assert "_write_shard_locked" in child[0].evidence[1]
    assert (28344, "collective", 28227) in _edges(d)  # rank 1 in the save's barrier, for rank 0


def test_requests_held_behind_the_router_are_http_waits_along_the_chain() -> None:
    d = diagnosed(ROUTER / "held_behind_router.tar.gz")
    assert _edges(d) == {(25, "http_request", 7), (24, "http_request", 7), (24, "http_request", 25)}
    router = next(w for w in d.waits if w.waiter.pid == 25)
    assert any(line.startswith("[engine_http]") for line in router.evidence)


def test_a_queue_cycle_is_two_queue_waits_between_the_engines() -> None:
    d = diagnosed(DEMO / "actor_queue_cycle.tar.gz")
    assert {(21687, "queue", 21688), (21688, "queue", 21687)} <= _edges(d)


def test_a_progressing_job_has_no_waits_and_the_json_says_so() -> None:
    d = diagnosed(DEMO / "none.tar.gz")
    assert d.verdict.status.value == "progressing" and d.waits == ()
    assert report_json(d)["waits"] == []


def test_the_json_report_carries_each_wait(tmp_path: Path) -> None:
    d = diagnosed(DEMO / "checkpoint_writer_deadlock.tar.gz")
    waits = json.loads(json.dumps(report_json(d)))["waits"]
    assert len(waits) == len(d.waits)
    child = next(w for w in waits if w["kind"] == "child")
    assert child["waiter"] == {
        "label": "train rank 0",
        "role": "train_rank",
        "node_ip": d.waits[[w.kind for w in d.waits].index(WaitKind.CHILD)].waiter.node_ip,
        "pid": 28227,
        "url": None,
        "actor_id": child["waiter"]["actor_id"],
    }
    assert child["waited_for"]["pid"] == 28605 and child["evidence"]
