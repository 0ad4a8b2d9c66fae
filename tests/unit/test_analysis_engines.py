"""Engine states from SGLang answers (bodies recorded from the SGLang stand-in, see
tests/fixtures/README.md, parsed by the real parsers) and from the processes of the engine."""

from __future__ import annotations

from pathlib import Path

from slime_hangdoctor.analysis.engines import EngineState, read_engines
from slime_hangdoctor.analysis.world import build_world
from slime_hangdoctor.facts import Outcome
from slime_hangdoctor.parsers import sglang
from slime_hangdoctor.snapshot import HttpObs
from slime_hangdoctor.topology import Engine
from slime_hangdoctor.verdict import Role
from tests.unit.analysis_builders import NODE, http, member, proc, procs_obs, snapshot, topology

SG = Path(__file__).resolve().parents[1] / "fixtures" / "sglang"
TIMED_OUT, UNAVAILABLE = Outcome.TIMED_OUT, Outcome.UNAVAILABLE
URL = f"http://{NODE}:15000"


def _metrics(name: str, sample: int) -> HttpObs:
    return http(URL, "/metrics", 200, sglang.parse_metrics((SG / name).read_text()), sample=sample)


def _state(*obs: HttpObs, **kw: object) -> EngineState:
    topo = kw.pop("topo", topology(engines=[Engine(URL, NODE)]))
    world = build_world(snapshot(http=obs, **kw), topo)  # type: ignore[arg-type]
    (engine,) = read_engines(world)
    return engine.state


def test_tokens_moving_is_busy() -> None:
    assert (
        _state(_metrics("metrics_busy.txt", 0), _metrics("metrics_after.txt", 1))
        is EngineState.BUSY
    )


def test_idle_engine() -> None:
    loads = sglang.parse_loads((SG / "v1_loads_idle.json").read_bytes())
    assert (
        _state(
            _metrics("metrics_idle.txt", 0),
            _metrics("metrics_idle.txt", 1),
            http(URL, "/v1/loads", 200, loads, sample=1),
        )
        is EngineState.IDLE
    )


def test_request_in_flight_and_frozen_counters_is_stuck() -> None:
    loads = sglang.parse_loads((SG / "v1_loads_stuck.json").read_bytes())
    info = sglang.parse_server_info((SG / "server_info_stuck.json").read_bytes())
    obs = (
        _metrics("metrics_stuck.txt", 0),
        _metrics("metrics_stuck.txt", 1),
        http(URL, "/v1/loads", 200, loads, sample=1),
        http(URL, "/server_info", 200, info, sample=1),
    )
    assert _state(*obs) is EngineState.STUCK


def test_scheduler_not_answering_is_unresponsive_with_one_sample() -> None:
    info = sglang.parse_server_info((SG / "server_info_stuck.json").read_bytes())
    assert _state(http(URL, "/server_info", 200, info)) is EngineState.UNRESPONSIVE
    assert _state(http(URL, "/health", 503)) is EngineState.UNRESPONSIVE
    assert (
        _state(
            http(URL, "/server_info", None, error="timed out after 5.0s", outcome=TIMED_OUT),
            http(URL, "/model_info", 200),
        )
        is EngineState.UNRESPONSIVE
    )


def test_a_stalled_body_is_a_timeout_whatever_its_error_text() -> None:
    """The collector records a body that stalled after its headers as TIMED_OUT with a status and
    the reason "body incomplete after N s": the analysis reads the outcome, not the words."""
    stalled = http(URL, "/server_info", 200, error="body incomplete after 5.0s", outcome=TIMED_OUT)
    assert _state(stalled, http(URL, "/model_info", 200)) is EngineState.UNRESPONSIVE
    reworded = http(URL, "/server_info", None, error="no answer in time", outcome=Outcome.FAILED)
    assert _state(reworded, http(URL, "/model_info", 200)) is not EngineState.UNRESPONSIVE


def test_refused_everywhere_or_server_gone_is_dead() -> None:
    refused = http(URL, "/model_info", None, error="connection refused", outcome=UNAVAILABLE)
    assert _state(refused) is EngineState.DEAD
    topo = topology(
        member(Role.SGLANG_ENGINE, 410, "http_server", url=URL),
        engines=[Engine(URL, NODE, None, 410)],
    )
    gone = (procs_obs(0, proc(410, "python3 -c spawn")), procs_obs(1, proc(1, "init")))
    assert _state(_metrics("metrics_idle.txt", 0), processes=gone, topo=topo) is EngineState.DEAD


def test_weight_version_moving_is_busy() -> None:
    from slime_hangdoctor.facts import ModelInfo

    assert (
        _state(
            http(URL, "/model_info", 200, ModelInfo("m", "7"), sample=0),
            http(URL, "/model_info", 200, ModelInfo("m", "8"), sample=1),
        )
        is EngineState.BUSY
    )
