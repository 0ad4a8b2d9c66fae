"""When the engine probe does not send `/server_info` (issue 25 item 7): `server_info_risk` on the
first reads, recorded from the stand-in and the 0.5.15.post1 / 0.5.23 wheels (tests/fixtures/sglang)."""

from __future__ import annotations

from pathlib import Path

from slime_hangdoctor.collect.sglang import (
    ENGINE_ENDPOINTS,
    Answer,
    _Job,
    server_info_risk,
    server_info_silent,
)
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


def _with_server_info(jobs: list[_Job], body: bytes | None, elapsed_s: float = 2.0) -> list[_Job]:
    """`jobs` and a `/server_info` answer: `body` None = timed out after `elapsed_s`."""
    endpoint = next(e for e in ENGINE_ENDPOINTS if e.paths[0] == "/server_info")
    answer = Answer("/server_info", 0.0, elapsed_s=elapsed_s, body=body)
    answer.status = 200 if body is not None else None
    answer.outcome = Outcome.OK if body is not None else Outcome.TIMED_OUT
    return [*jobs, _Job(endpoint, answers=[answer])]


def test_an_empty_answer_on_0515_holds_later_samples_back() -> None:
    """Issue 46 item 5: the stuck stand-in's `internal_states: []` after the 2 s wait."""
    idle = (SG / "v1_loads_idle.json").read_bytes()
    stuck = (SG / "server_info_stuck.json").read_bytes()
    why = server_info_silent(_with_server_info(_jobs(v1_loads=idle), stuck))
    assert why is not None and "internal_states: [] after 2.0 s" in why and "0.5.15" in why, why


def test_a_timed_out_answer_of_an_unknown_version_holds_later_samples_back() -> None:
    why = server_info_silent(_with_server_info(_jobs(v1_loads=None), None, elapsed_s=2.5))
    assert why is not None and "timed out after 2.5 s" in why and "unknown version" in why, why


def test_an_answer_with_states_holds_nothing_back() -> None:
    idle = (SG / "v1_loads_idle.json").read_bytes()
    info = (SG / "server_info.json").read_bytes()
    assert server_info_silent(_with_server_info(_jobs(v1_loads=idle), info)) is None


def test_an_empty_answer_on_a_recovering_version_holds_nothing_back() -> None:
    """0.5.23's communicator recovers from a cancelled call: asking again costs nothing lasting."""
    recovering = tf.set_json_path(
        (SG / "v1_loads_idle.json").read_text(), ("version",), "0.5.23"
    ).encode()
    stuck = (SG / "server_info_stuck.json").read_bytes()
    assert server_info_silent(_with_server_info(_jobs(v1_loads=recovering), stuck)) is None
    assert server_info_silent(_jobs(v1_loads=recovering)) is None  # nothing sent: nothing held
