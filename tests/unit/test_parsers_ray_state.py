"""Ray dashboard parsers on real answers: 2x H200 (Ray 2.60, hang and busy) and a local CPU head."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from slime_hangdoctor.errors import ParseError
from slime_hangdoctor.parsers.ray_state import (
    parse_actors,
    parse_jobs,
    parse_node_summary,
    parse_nodes,
    parse_tasks,
)
from tests.fixtures import transforms as tf

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
RAY = REAL / "gpu-2xh200-ray-nccl-hang"
LOCAL = REAL / "local-cpu-ray-2.60-two-actors" / "dashboard"

ACTORS = "/api/v0/actors?detail=1&limit=1000"
TASKS = "/api/v0/tasks?detail=1&filter_keys=state&filter_predicates=%3D&filter_values=RUNNING"
NODES = "/api/v0/nodes?detail=1"
JOBS = "/api/jobs/"
SUMMARY = "/nodes?view=summary"
PARSERS: dict[str, Any] = {
    ACTORS: parse_actors,
    TASKS: parse_tasks,
    NODES: parse_nodes,
    JOBS: parse_jobs,
    SUMMARY: parse_node_summary,
}


def _body(run: str, endpoint: str) -> str:
    answers = json.loads((RAY / run / "dashboard.json").read_text(encoding="utf-8"))
    body: str = answers[endpoint]["body"]
    return body


# --------------------------------------------------------------------------- hang (2x H200)


def test_hang_actors() -> None:
    actors = {a.pid: a for a in parse_actors(_body("hang", ACTORS))}
    assert set(actors) == {3277, 3445, 3446}
    sup = actors[3277]
    assert (sup.class_name, sup.name, sup.ray_namespace) == (
        "JobSupervisor",
        "_ray_internal_job_actor_slime-hang",
        "SUPERVISOR_ACTOR_RAY_NAMESPACE",
    )
    rank = actors[3445]
    assert rank.class_name == "MegatronTrainRayActor" and rank.state == "ALIVE"
    assert rank.name is None  # slime's actors are unnamed: "" becomes None
    assert rank.actor_id == "8568d747372903d54e95d7bc02000000"
    assert rank.job_id == "02000000"
    assert rank.node_id == "ad8aa5130b13a85bd44468352a519a883abb6f60821db8dc454b1aa7"


def test_hang_running_tasks_name_the_method_and_pid() -> None:
    tasks = parse_tasks(_body("hang", TASKS))
    assert {(t.name, t.worker_pid, t.state) for t in tasks} == {
        ("MegatronTrainRayActor.update_weights", 3445, "RUNNING"),
        ("MegatronTrainRayActor.update_weights", 3446, "RUNNING"),
    }
    by_pid = {t.worker_pid: t for t in tasks}
    assert by_pid[3445].actor_id == "8568d747372903d54e95d7bc02000000"
    assert by_pid[3445].start_time_ms == 1795992932247
    assert by_pid[3445].task_id == "ce868e48e2fa9a948568d747372903d54e95d7bc02000000"


def test_hang_nodes_and_jobs() -> None:
    (node,) = parse_nodes(_body("hang", NODES))
    assert (node.node_ip, node.state, node.is_head) == ("192.0.2.2", "ALIVE", True)
    (job,) = parse_jobs(_body("hang", JOBS))
    assert (job.submission_id, job.job_id, job.status) == ("slime-hang", "02000000", "RUNNING")
    assert job.driver_pid == 3349  # a string in the answer
    assert job.driver_node_ip == "192.0.2.2"
    assert job.entrypoint == "python3 driver.py hang"


def test_hang_node_summary_gives_gpus_with_their_processes() -> None:
    (series,) = parse_node_summary(_body("hang", SUMMARY))
    assert series.node_ip == "192.0.2.2" and len(series.samples) == 1
    gpu0, gpu1 = series.samples[0].gpus
    assert (gpu0.index, gpu0.util_gpu, gpu0.util_mem) == (0, 100, None)
    assert gpu0.power_w == pytest.approx(124.012)
    assert gpu0.processes == ((3445, 1710 * 1024 * 1024),)
    assert gpu0.uuid == "GPU-1fa1ea7b-4a4d-3b8b-50b8-b1a4d1678474"
    assert (gpu1.index, gpu1.util_gpu) == (1, 0)
    assert gpu1.processes == ((3446, 1706 * 1024 * 1024),)


# --------------------------------------------------------------------------- busy (2x H200)


def test_busy_keeps_dead_actors_of_the_earlier_job() -> None:
    actors = parse_actors(_body("busy", ACTORS))
    states = sorted((a.class_name, a.state, a.pid) for a in actors)
    assert ("MegatronTrainRayActor", "DEAD", 3445) in states
    assert ("MegatronTrainRayActor", "ALIVE", 4121) in states
    assert len(actors) == 6


def test_busy_jobs_running_and_stopped() -> None:
    jobs = {j.submission_id: j for j in parse_jobs(_body("busy", JOBS))}
    assert jobs["slime-busy"].status == "RUNNING" and jobs["slime-busy"].driver_pid == 4028
    assert jobs["slime-hang"].status == "STOPPED" and jobs["slime-hang"].driver_pid == 3349


def test_busy_running_tasks() -> None:
    assert {t.worker_pid for t in parse_tasks(_body("busy", TASKS))} == {4121, 4122}


# --------------------------------------------------------------------------- local CPU head


def test_local_cpu_head_answers() -> None:
    actors = {a.class_name: a for a in parse_actors((LOCAL / "actors.json").read_bytes())}
    assert {"RolloutManager", "MegatronTrainRayActor", "JobSupervisor"} <= set(actors)
    tasks = {t.name: t for t in parse_tasks((LOCAL / "tasks_running.json").read_bytes())}
    assert tasks["RolloutManager.generate"].worker_pid == actors["RolloutManager"].pid
    (job,) = parse_jobs((LOCAL / "jobs.json").read_bytes())
    assert job.submission_id == "slime-hang-1" and job.driver_pid == 1620
    (series,) = parse_node_summary((LOCAL / "node_summary.json").read_bytes())
    assert series.samples[0].gpus == ()  # no GPU on this node
    (node,) = parse_nodes((LOCAL / "nodes.json").read_bytes())
    assert node.is_head


# --------------------------------------------------------------------------- bad input


def test_error_envelope_becomes_parse_error_with_msg() -> None:
    body = tf.set_json_path(_body("hang", ACTORS), ("result",), False)
    body = tf.set_json_path(body, ("msg",), "Failed to connect to GCS")
    with pytest.raises(ParseError, match="Failed to connect to GCS"):
        parse_actors(body)


@pytest.mark.parametrize("endpoint", list(PARSERS))
def test_truncated_and_undecodable_bodies(endpoint: str) -> None:
    body = _body("hang", endpoint)
    parser = PARSERS[endpoint]
    for n in (0, 1, len(body) // 2, len(body) - 1):
        with pytest.raises(ParseError):
            parser(tf.truncate_at(body, n))
    with pytest.raises(ParseError, match="UTF-8"):
        parser(tf.insert_invalid_utf8(body.encode(), len(body) // 3))


def test_wrong_answer_for_the_parser() -> None:
    with pytest.raises(ParseError):
        parse_actors(_body("hang", JOBS))  # a list, not the state API envelope
    with pytest.raises(ParseError):
        parse_jobs(_body("hang", ACTORS))
    with pytest.raises(ParseError):
        parse_node_summary(_body("hang", ACTORS))


@pytest.mark.parametrize(
    ("endpoint", "key"),
    [
        (ACTORS, "actor_id"),
        (TASKS, "task_id"),
        (NODES, "node_id"),
        (NODES, "node_ip"),
        (JOBS, "status"),
    ],
)
def test_missing_identity_key(endpoint: str, key: str) -> None:
    with pytest.raises(ParseError, match=key):
        PARSERS[endpoint](tf.drop_json_key(_body("hang", endpoint), key))


def test_pid_as_string_and_zero() -> None:
    body = _body("hang", ACTORS)
    rows = ("data", "result", "result")
    assert parse_actors(tf.set_json_path(body, (*rows, 1, "pid"), "3446"))[1].pid == 3446
    assert parse_actors(tf.set_json_path(body, (*rows, 1, "pid"), 0))[1].pid is None
    with pytest.raises(ParseError, match="pid"):
        parse_actors(tf.set_json_path(body, (*rows, 1, "pid"), "abc"))


@pytest.mark.parametrize("endpoint", list(PARSERS))
@pytest.mark.parametrize("value", [None, "x", [], {}, True, 1.5e300])
def test_any_value_replaced_gives_facts_or_parse_error(endpoint: str, value: object) -> None:
    body = _body("hang", endpoint)
    for path in tf.json_paths(body):
        try:
            PARSERS[endpoint](tf.set_json_path(body, path, value))
        except ParseError:
            pass


def test_gcs_address_is_read_from_the_raylet_command_line_in_the_node_summary() -> None:
    """A dashboard-only address still lets the doctor reach the GCS (for tasks on other nodes)."""
    from slime_hangdoctor.parsers.ray_state import gcs_address_from_summary

    real = Path(__file__).parents[1] / "fixtures/real/gpu-2xh200-ray-nccl-hang/hang/dashboard.json"
    body = json.loads(real.read_text())["/nodes?view=summary"]["body"]
    assert gcs_address_from_summary(body) == "192.0.2.2:6379"
    assert gcs_address_from_summary(body.replace("--gcs-address=", "--gcs-host=")) is None
