"""When the engine probe does not send `/server_info` (issue 25 item 7): `server_info_risk` on the
first reads, recorded from the stand-in and the 0.5.15.post1 / 0.5.23 wheels (tests/fixtures/sglang)."""

from __future__ import annotations

from pathlib import Path

from slime_hangdoctor.collect.sglang import ENGINE_ENDPOINTS, Answer, _Job, server_info_risk
from slime_hangdoctor.outcome import Outcome
from tests.fixtures import transforms as tf

SG = Path(__file__).resolve().parents[1] / "fixtures" / "sglang"


def _jobs(**bodies: bytes | None) -> list[_Job]:
    """One job per first-read endpoint; `bodies` by name (v1_loads, metrics): None = timed out."""
    paths = {"v1_loads": "/v1/loads", "metrics": "/metrics"}
    jobs: list[_Job] = []
    for name, body in bodies.items():
        endpoint = next(e for e in ENGINE_ENDPOINTS if e.paths[0] == paths[name])
        answer = Answer(paths[name], 0.0, status=200 if body is not None else None, body=body)
        answer.outcome = Outcome.OK if body is not None else Outcome.TIMED_OUT
        jobs.append(_Job(endpoint, answers=[answer]))
    return jobs


def test_an_idle_0515_engine_is_asked() -> None:
    idle = (SG / "v1_loads_idle.json").read_bytes()
    metrics = (SG / "metrics_idle.txt").read_bytes()
    assert server_info_risk(_jobs(v1_loads=idle, metrics=metrics)) is None


def test_a_busy_0515_engine_is_not_asked() -> None:
    why = server_info_risk(_jobs(v1_loads=(SG / "v1_loads_busy.json").read_bytes()))
    assert why is not None and "2 running" in why and "0.5.15.post1" in why


def test_generate_held_at_the_http_layer_is_busy() -> None:
    """Paused with a /generate held at the pause gate (0.5.15's HTTP middleware counts it)."""
    idle = (SG / "v1_loads_idle.json").read_bytes()
    paused = (SG / "metrics_http_paused_0.5.15.post1.txt").read_bytes()
    why = server_info_risk(_jobs(v1_loads=idle, metrics=paused))
    assert why is not None and "/generate" in why


def test_a_recovering_version_is_always_asked() -> None:
    busy = tf.set_json_path(
        (SG / "v1_loads_busy.json").read_text(), ("version",), "0.5.23"
    ).encode()
    assert server_info_risk(_jobs(v1_loads=busy)) is None


def test_an_http_process_that_answers_nothing_in_time_is_not_asked() -> None:
    why = server_info_risk(_jobs(v1_loads=None, metrics=None))
    assert why is not None and "unknown version" in why
