"""Parsers of the task history, placement groups, cluster status and actor death causes, on real
Ray 2.60 answers (tests/fixtures/real/local-cpu-ray-2.60-actor-queues, see the fixtures README)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slime_hangdoctor.errors import ParseError
from slime_hangdoctor.parsers import ray_state
from tests.fixtures import transforms as tf

REAL = Path(__file__).parent.parent / "fixtures" / "real" / "local-cpu-ray-2.60-actor-queues"


def _body(name: str) -> bytes:
    return (REAL / name).read_bytes()


def test_task_page_keeps_parents_types_times_and_counts() -> None:
    page = ray_state.parse_task_page(_body("tasks.json"))
    assert (page.total, page.num_filtered, page.truncated) == (13, 13, False)
    by_name: dict[str, list[str]] = {}
    for t in page.tasks:
        by_name.setdefault(t.name, []).append(t.state)
    assert by_name["SGLangEngine.init_group"] == ["RUNNING", "RUNNING"]
    assert sorted(by_name["SGLangEngine.join_group"]) == ["SUBMITTED_TO_WORKER"] * 2
    join = next(t for t in page.tasks if t.name == "SGLangEngine.join_group")
    parent = next(t for t in page.tasks if t.task_id == join.parent_task_id)
    assert parent.name == "SGLangEngine.init_group" and parent.actor_id != join.actor_id
    die = next(t for t in page.tasks if t.method == "die")
    assert (die.state, die.error_type, die.task_type) == ("FAILED", "ACTOR_DIED", "ACTOR_TASK")
    pause = next(t for t in page.tasks if t.method == "pause_generation")
    assert pause.end_time_ms is not None and pause.start_time_ms is not None
    assert pause.end_time_ms >= pause.start_time_ms


def test_truncated_page_is_flagged() -> None:
    text = tf.set_json_path(_body("tasks.json").decode(), ("data", "result", "num_filtered"), 5000)
    assert ray_state.parse_task_page(text).truncated


def test_dead_actor_death_cause() -> None:
    dead = [a for a in ray_state.parse_actors(_body("actors.json")) if a.state == "DEAD"]
    assert len(dead) == 1 and dead[0].death is not None
    d = dead[0].death
    assert d.reason == "WORKER_DIED" and d.exit_type == "SYSTEM_ERROR"
    assert d.exit_detail == "Worker unexpectedly exits with a connection error code 2"
    assert d.never_started is False and d.message is not None and len(d.message) <= 600
    assert all(
        a.death is None for a in ray_state.parse_actors(_body("actors.json")) if a.state == "ALIVE"
    )


def test_placement_group_pending_infeasible() -> None:
    (pg,) = ray_state.parse_placement_groups(_body("placement_groups.json"))
    assert (pg.name, pg.state, pg.scheduling_state) == ("actor_pg", "PENDING", "INFEASIBLE")
    assert pg.demand() == {"GPU": 8.0} and len(pg.bundles) == 8
    assert all(b.node_id is None for b in pg.bundles)


def test_cluster_status_capacity_and_pg_demand() -> None:
    c = ray_state.parse_cluster_status(_body("cluster_status.json"))
    assert c.total["CPU"] == 2.0 and "GPU" not in c.total and c.used["CPU"] == 0.0
    assert len(c.per_node_total) == 1
    (d,) = c.pg_demands
    assert d.strategy == "PACK" and d.total() == {"GPU": 8.0} and d.count == 1


@pytest.mark.parametrize(
    ("name", "path", "value"),
    [
        ("cluster_status.json", ("data", "clusterStatus", "loadMetricsReport", "usage"), [1]),
        ("cluster_status.json", ("data", "clusterStatus", "loadMetricsReport", "pgDemand"), "x"),
        ("cluster_status.json", ("data", "clusterStatus"), None),
        ("placement_groups.json", ("data", "result", "result", 0, "bundles"), "x"),
        ("placement_groups.json", ("data", "result", "result", 0, "stats"), [1]),
        ("actors.json", ("data", "result", "result", 1, "death_cause"), "x"),
        ("tasks.json", ("data", "result", "result", 0, "end_time_ms"), "soon"),
    ],
)
def test_malformed_answers_are_parse_errors(
    name: str, path: tuple[object, ...], value: object
) -> None:
    text = tf.set_json_path(_body(name).decode(), path, value)  # type: ignore[arg-type]
    parse = {
        "cluster_status.json": ray_state.parse_cluster_status,
        "placement_groups.json": ray_state.parse_placement_groups,
        "actors.json": ray_state.parse_actors,
        "tasks.json": ray_state.parse_task_page,
    }[name]
    with pytest.raises(ParseError):
        parse(text)  # type: ignore[operator]
