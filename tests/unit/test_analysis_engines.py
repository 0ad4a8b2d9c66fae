"""Engine states from SGLang answers (bodies recorded from the SGLang stand-in, see
tests/fixtures/README.md, parsed by the real parsers) and from the processes of the engine."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from slime_hangdoctor.analysis.parts import engines as engine_suspects
from slime_hangdoctor.analysis.readers.sglang_http import EngineRead, EngineState, read_engines
from slime_hangdoctor.analysis.source_analysis import WEAK, Reads, assess
from slime_hangdoctor.analysis.world import World, build_world
from slime_hangdoctor.outcome import Outcome
from slime_hangdoctor.parsers import sglang
from slime_hangdoctor.parsers.sglang import HttpObs
from slime_hangdoctor.topology import Engine
from slime_hangdoctor.verdict import Finding, Role, Stage, Verdict
from tests.fixtures import transforms as tf
from tests.unit import recorded_shapes as rs
from tests.unit.analysis_builders import NODE, http, member, snapshot, topology
from tests.unit.demo_bundles import diagnosed, unpacked

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
    # the recorded process tables of demo fault engine_server_killed, the second as read once
    # engine 0's HTTP server (pid 22895) had exited (`transforms.processes_without`)
    killed = rs.bundle("demo/engine_server_killed")
    server = 22895
    topo = topology(
        member(Role.SGLANG_ENGINE, server, "http_server", url=URL),
        engines=[Engine(URL, NODE, None, server)],
    )
    gone = (rs.processes(killed, 0), rs.processes(killed, 1, without=frozenset({server})))
    assert _state(_metrics("metrics_idle.txt", 0), processes=gone, topo=topo) is EngineState.DEAD


def test_weight_version_moving_is_busy() -> None:
    from slime_hangdoctor.parsers.sglang import ModelInfo

    assert (
        _state(
            http(URL, "/model_info", 200, ModelInfo("m", "7"), sample=0),
            http(URL, "/model_info", 200, ModelInfo("m", "8"), sample=1),
        )
        is EngineState.BUSY
    )


# --------------------------------------------------------------------------- issue 18: real SGLang
# Bodies: the stand-in's captures (server_info_stuck.json: slime's patch's `[]` form, byte for byte
# the shape of 0.5.15's http_server.py + patch lines 333-344) and the wheel's own /metrics code
# (metrics_http_*.txt, capture_wheel_http_metrics.py); variants by named transformations.


def _world(*obs: HttpObs, **kw: object) -> World:
    topo = kw.pop("topo", topology(engines=[Engine(URL, NODE)]))
    return build_world(snapshot(http=obs, **kw), topo)  # type: ignore[arg-type]


def _read(*obs: HttpObs, **kw: object) -> EngineRead:
    (engine,) = read_engines(_world(*obs, **kw))
    return engine


def _page(*names: str, sample: int) -> HttpObs:
    text = tf.prom_merge(*((SG / n).read_text() for n in names))
    return http(URL, "/metrics", 200, sglang.parse_metrics(text), sample=sample)


def _info(version: str | None = None) -> HttpObs:
    body = (SG / "server_info_stuck.json").read_text()
    if version is not None:
        body = tf.set_json_path(body, ("version",), version)
    return http(URL, "/server_info", 200, sglang.parse_server_info(body), sample=1)


def _loads(name: str, sample: int = 1) -> HttpObs:
    return http(URL, "/v1/loads", 200, sglang.parse_loads((SG / name).read_bytes()), sample=sample)


PAUSED_HTTP = "metrics_http_paused_0.5.15.post1.txt"
RESUMED_HTTP = "metrics_http_resumed_0.5.15.post1.txt"


def test_empty_internal_states_alone_on_0515_is_unknown_with_a_poisoned_note() -> None:
    """Item 1: on 0.5.15 + slime's patch a timed-out /server_info leaves the communicator's
    `_result_event` set (communicator.py:38-58): every later call answers [] after 2 s."""
    e = _read(_metrics("metrics_idle.txt", 0), _metrics("metrics_idle.txt", 1), _info())
    assert e.state is EngineState.UNKNOWN
    assert any("poisoned" in n for n in e.notes)


def test_empty_internal_states_on_a_progressing_engine_is_busy_and_noted() -> None:
    e = _read(_metrics("metrics_busy.txt", 0), _metrics("metrics_after.txt", 1), _info())
    assert e.state is EngineState.BUSY
    assert any("poisoned" in n for n in e.notes)


def test_empty_internal_states_with_frozen_progress_is_stuck() -> None:
    e = _read(
        _metrics("metrics_stuck.txt", 0),
        _metrics("metrics_stuck.txt", 1),
        _loads("v1_loads_stuck.json"),
        _info(),
    )
    assert e.state is EngineState.STUCK
    assert any("internal_states == []" in line for line in e.evidence)
    assert e.notes == ()


def test_empty_internal_states_held_back_at_the_next_sample_still_counts() -> None:
    """Issue 46 item 5: sample 1 held `/server_info` back because sample 0 got `[]` (the
    collector's `server_info_held`): that answer is still the engine's latest word on it."""
    empty = _info()
    first = HttpObs(empty.kind, 0, empty.answer, empty.parsed)
    held = http(URL, "/server_info", None, sample=1, outcome=UNAVAILABLE)
    held = HttpObs(held.kind, 1, replace(held.answer, sent=False), None)
    e = _read(
        _metrics("metrics_stuck.txt", 0),
        _metrics("metrics_stuck.txt", 1),
        _loads("v1_loads_stuck.json"),
        first,
        held,
    )
    assert e.state is EngineState.STUCK
    assert any("internal_states == []" in line for line in e.evidence), e.evidence


def test_empty_internal_states_on_a_recovering_version_is_unresponsive() -> None:
    """0.5.23's communicator takes a lock that a cancelled call releases: `[]` there is fresh."""
    assert _read(_info("0.5.23")).state is EngineState.UNRESPONSIVE
    assert _read(_info("0.5.15.post1")).state is EngineState.UNKNOWN
    assert _read(_info("not a version")).state is EngineState.UNKNOWN


def test_paused_engine_is_paused_not_idle() -> None:
    """Item 2: abort-mode pause, 0.5.15: the scheduler is idle (/v1/loads 0/0), more pauses than
    continues and /generate requests held at the HTTP layer."""
    e = _read(
        _page("metrics_idle.txt", PAUSED_HTTP, sample=0),
        _page("metrics_idle.txt", PAUSED_HTTP, sample=1),
        _loads("v1_loads_idle.json"),
    )
    assert e.state is EngineState.PAUSED
    assert any("/pause_generation" in line for line in e.evidence)
    assert any("2 /generate requests in flight" in line for line in e.evidence)
    resumed = _read(
        _page("metrics_idle.txt", RESUMED_HTTP, sample=0),
        _page("metrics_idle.txt", RESUMED_HTTP, sample=1),
        _loads("v1_loads_idle.json"),
    )
    assert resumed.state is EngineState.IDLE


def test_ready_503_with_ping_200_is_paused() -> None:
    """Item 2, >= 0.5.20: /ready is `not is_pause and is_healthy()`, /ping `is_healthy()`."""
    idle = (_metrics("metrics_idle.txt", 0), _metrics("metrics_idle.txt", 1))
    paused = _read(
        *idle,
        _loads("v1_loads_idle.json"),
        http(URL, "/ready", 503, sample=1),
        http(URL, "/ping", 200, sample=1),
    )
    assert paused.state is EngineState.PAUSED
    unhealthy = _read(
        *idle,
        _loads("v1_loads_idle.json"),
        http(URL, "/ready", 503, sample=1),
        http(URL, "/ping", 503, sample=1),
    )
    assert unhealthy.state is EngineState.IDLE
    old = _read(
        *idle,
        _loads("v1_loads_idle.json"),
        http(URL, "/ready", 404, sample=1),
        http(URL, "/ping", 200, sample=1),
    )
    assert old.state is EngineState.IDLE


def test_in_place_pause_with_frozen_load_is_paused_not_stuck() -> None:
    """Item 3: paused in_place the scheduler loop `continue`s before publishing its load
    (scheduler.py:1551), so /v1/loads keeps running > 0 while the realtime counter is flat."""
    obs = (
        _page("metrics_stuck.txt", PAUSED_HTTP, sample=0),
        _page("metrics_stuck.txt", PAUSED_HTTP, sample=1),
        _loads("v1_loads_stuck.json"),
    )
    assert _read(*obs).state is EngineState.PAUSED
    # the same frozen load without pause evidence is stuck
    plain = (_metrics("metrics_stuck.txt", 0), _metrics("metrics_stuck.txt", 1))
    assert _read(*plain, _loads("v1_loads_stuck.json")).state is EngineState.STUCK


def test_weight_sync_call_in_flight_in_every_sample_places_the_engine() -> None:
    """Item 4: http_requests_active{endpoint="/update_weights_from_distributed"} in both samples."""
    e = _read(
        _page("metrics_idle.txt", PAUSED_HTTP, sample=0),
        _page("metrics_idle.txt", PAUSED_HTTP, sample=1),
        _loads("v1_loads_idle.json"),
    )
    assert e.calls == e.calls_held == ("/update_weights_from_distributed",)
    assert e.call_stage is Stage.NCCL_BROADCAST
    done = _read(
        _page("metrics_idle.txt", PAUSED_HTTP, sample=0),
        _page("metrics_idle.txt", RESUMED_HTTP, sample=1),
    )
    assert done.calls == done.calls_held == ()


# slime main's control calls with no timeout, each recorded in flight alone through SGLang
# 0.5.15.post1's own metrics middleware (capture_wheel_http_metrics.py --calls); the stage each
# one's callers in slime 624b824 give it (engines.CALL_STAGES cites them).
SLIME_MAIN_CALLS = (
    ("/flush_cache", Stage.WEIGHT_SYNC),
    ("/update_weights_from_disk", Stage.WEIGHT_SYNC),
    ("/pull_weights", Stage.WEIGHT_SYNC),
    ("/post_process_weights", Stage.WEIGHT_SYNC),
    ("/continue_generation", Stage.WEIGHT_SYNC),
)


def _active_method(page: str, path: str) -> str:
    """The `method` label of `path`'s `sglang:http_requests_active` series in flight on `page`."""
    (method,) = {
        s.labels["method"]
        for family in text_string_to_metric_families((SG / page).read_text())
        for s in family.samples
        if s.name == "sglang:http_requests_active"
        and s.labels.get("endpoint") == path
        and s.value > 0
    }
    return method


@pytest.mark.parametrize(("path", "stage"), SLIME_MAIN_CALLS)
def test_slime_main_call_in_flight_places_the_engine(path: str, stage: Stage) -> None:
    """Issue 24 item 4: each call in flight in both samples places the engine in its stage, and
    is a weak suspect with that stage; the same page read once, then a page where it returned."""
    page = f"metrics_http_call_{path.strip('/')}_0.5.15.post1.txt"
    held = (_page("metrics_idle.txt", page, sample=0), _page("metrics_idle.txt", page, sample=1))
    world = _world(*held, _loads("v1_loads_idle.json"))
    (e,) = read_engines(world)
    assert e.calls == e.calls_held == (path,)
    assert e.call_stage is stage
    reads = Reads(world, assess(world))
    (s,) = [s for s in engine_suspects.suspects(reads) if s.source == "sglang"]
    assert s.stage is stage and path in s.why
    # the method the recorded page counts the call under (slime's own: GET for /flush_cache)
    assert f"{_active_method(page, path)} {path}" in s.why
    assert any(f"{_active_method(page, path)} {URL}{path} in flight" in x for x in e.evidence)
    # the next call's page: this one has returned (its series at 0), another is in flight
    later = SLIME_MAIN_CALLS[(SLIME_MAIN_CALLS.index((path, stage)) + 1) % len(SLIME_MAIN_CALLS)]
    nxt = f"metrics_http_call_{later[0].strip('/')}_0.5.15.post1.txt"
    once = _read(held[0], _page("metrics_idle.txt", nxt, sample=1), _loads("v1_loads_idle.json"))
    assert path not in once.calls and path not in once.calls_held


def test_held_call_is_a_weak_suspect_with_its_stage() -> None:
    world = _world(
        _page("metrics_idle.txt", PAUSED_HTTP, sample=0),
        _page("metrics_idle.txt", PAUSED_HTTP, sample=1),
        _loads("v1_loads_idle.json"),
    )
    reads = Reads(world, assess(world))
    (s,) = [s for s in engine_suspects.suspects(reads) if s.source == "sglang"]
    assert s.stage is Stage.NCCL_BROADCAST and s.weight == WEAK
    assert "/update_weights_from_distributed" in s.why


def test_v1_loads_without_ranks_is_unknown_not_idle() -> None:
    """Item 5: `{"loads": []}` (shared memory not attached, load_snapshot.py:571-573)."""
    body = tf.set_json_path((SG / "v1_loads_idle.json").read_text(), ("loads",), [])
    idle = (_metrics("metrics_idle.txt", 0), _metrics("metrics_idle.txt", 1))
    gauges_gone = [
        http(
            URL,
            "/metrics",
            200,
            sglang.parse_metrics(
                tf.prom_drop_family(
                    tf.prom_drop_family(
                        (SG / "metrics_idle.txt").read_text(), "sglang:num_running_reqs"
                    ),
                    "sglang:num_queue_reqs",
                )
            ),
            sample=s,
        )
        for s in (0, 1)
    ]
    e = _read(*gauges_gone, http(URL, "/v1/loads", 200, sglang.parse_loads(body), sample=1))
    assert e.state is EngineState.UNKNOWN
    assert any("shared-memory" in line for line in e.evidence)
    assert _read(*idle, _loads("v1_loads_idle.json")).state is EngineState.IDLE


def test_get_load_timeout_is_not_a_scheduler_round_trip() -> None:
    """Item 6: /get_load reads the shared-memory snapshot in 0.5.15 (http_server.py:730-756)."""
    idle = (_metrics("metrics_idle.txt", 0), _metrics("metrics_idle.txt", 1))
    e = _read(
        *idle,
        http(URL, "/get_load", None, error="timed out after 2.5s", sample=1, outcome=TIMED_OUT),
    )
    assert e.state is not EngineState.UNRESPONSIVE
    e = _read(
        *idle,
        http(URL, "/server_info", None, error="timed out after 2.5s", sample=1, outcome=TIMED_OUT),
    )
    assert e.state is EngineState.UNRESPONSIVE


def test_server_info_weight_version_never_overrides_model_info() -> None:
    """Item 7: 0.5.23's /server_info carries the startup weight_version (http_server.py:863-873)."""
    from slime_hangdoctor.parsers.sglang import ModelInfo

    def info(version: str, weight: str, sample: int) -> HttpObs:
        body = tf.set_json_path((SG / "server_info.json").read_text(), ("version",), version)
        body = tf.set_json_path(body, ("weight_version",), weight)
        return http(URL, "/server_info", 200, sglang.parse_server_info(body), sample=sample)

    e = _read(
        http(URL, "/model_info", 200, ModelInfo("m", "7"), sample=0),
        info("0.5.23", "default", 0),
        http(URL, "/model_info", 200, ModelInfo("m", "7"), sample=1),
        info("0.5.23", "default", 1),
    )
    assert e.weight_versions == ("7", "7") and e.state is not EngineState.BUSY
    assert _read(info("0.5.23", "default", 0), info("0.5.23", "3", 1)).weight_versions == ()
    moved = _read(info("0.5.15.post1", "2", 0), info("0.5.15.post1", "3", 1))
    assert moved.weight_versions == ("2", "3") and moved.state is EngineState.BUSY


def test_flat_gauges_without_a_realtime_counter_are_not_frozen() -> None:
    """Item 8: gauges refresh only at prefill, every decode_log_interval steps or 30 s idle
    (metrics_reporter.py:1044): `num_running_reqs 2` flat over the window is not a stall unless
    the realtime counter (every decode step) is flat too."""
    after = (SG / "metrics_after.txt").read_text()
    no_realtime = tf.prom_drop_family(after, "sglang:realtime_tokens")
    no_step = tf.prom_drop_family(no_realtime, "sglang:forward_execution_seconds")
    obs = [http(URL, "/metrics", 200, sglang.parse_metrics(no_step), sample=s) for s in (0, 1)]
    e = _read(*obs)
    assert e.state is not EngineState.STUCK and not e.frozen
    with_realtime = [_metrics("metrics_after.txt", s) for s in (0, 1)]
    assert _read(*with_realtime, _loads("v1_loads_stuck.json")).state is EngineState.STUCK


def test_gauges_never_count_even_without_a_load() -> None:
    """Issue 25 item 8: with `/v1/loads` unknown, `num_running_reqs` (as last refreshed: at prefill,
    every 40 decode steps, every 30 s idle) beside a flat realtime counter is not a stall; the
    gauges are shown, not counted."""
    with_realtime = [_metrics("metrics_after.txt", s) for s in (0, 1)]
    e = _read(*with_realtime)
    assert e.state is EngineState.UNKNOWN and e.running is None, e
    assert any("gauges say running" in line for line in e.evidence), e.evidence


def test_router_marks_dead_and_counts_requests_held_before_the_scheduler() -> None:
    """Item 10: /workers entries carry is_healthy and load (the router's in-flight count). Requests
    the router counts and the scheduler does not hold, with no pause evidence, are held, not
    paused (issue 21 item 5)."""
    from slime_hangdoctor.parsers.sglang import RouterWorker, RouterWorkers

    def router(healthy: bool, load: int) -> HttpObs:
        workers = RouterWorkers((URL,), "workers", (RouterWorker(URL, healthy, load),))
        return http("http://10.0.0.1:3000", "/workers", 200, workers, sample=1, kind="router")

    dead = _read(http(URL, "/model_info", None, outcome=UNAVAILABLE), router(False, 0))
    assert dead.state is EngineState.DEAD
    assert any("router marks" in line for line in dead.evidence)
    idle = (_metrics("metrics_idle.txt", 0), _metrics("metrics_idle.txt", 1))
    held = _read(*idle, _loads("v1_loads_idle.json"), router(True, 3))
    assert held.state is EngineState.HELD
    assert any("router counts 3" in line for line in held.evidence)
    assert held.evidence[0].startswith("3 requests held between the HTTP layer and the scheduler")
    assert _read(*idle, _loads("v1_loads_idle.json"), router(True, 0)).state is EngineState.IDLE


# --------------------------------------------------------------------------- the orphaned pause

# demo update_pause_orphaned (recorded, tests/fixtures/README.md): engine 1's SGLangEngine actor
ORPHANED_CALLER = 5534


def _orphaned_pause(verdict: Verdict) -> list[Finding]:
    return [f for f in verdict.findings if f.rule == "known-orphaned-pause"]


def test_a_pause_that_never_returns_on_an_engine_not_paused_is_orphaned(tmp_path: Path) -> None:
    """sglang#33696 on the demo: a continue reached engine 1's tokenizer worker while the
    update's pause waited for its broadcast. The pause is in flight at the HTTP layer in every
    sample, the engine is not paused (as many continues answered) and holds nothing to drain,
    and its SGLangEngine actor waits in `pause_generation`'s HTTP call at both samples."""
    v = diagnosed(unpacked("update_pause_orphaned", tmp_path)).verdict
    assert (v.status.value, v.stage) == ("hung", Stage.WEIGHT_SYNC), v.summary
    assert v.culprits[0].pid == ORPHANED_CALLER
    (f,) = _orphaned_pause(v)
    assert "the pause call is orphaned" in f.message and "sglang#33696" in f.message
    assert f"(pid {ORPHANED_CALLER}) waits in that HTTP call" in f.message
    assert any("pause_generation in flight" in e for e in f.evidence), f.evidence
    assert any(f"py-spy dump --pid {ORPHANED_CALLER}" in (s.command or s.why) for s in v.next_steps)


def test_a_pause_held_on_a_paused_engine_or_without_the_callers_stack_is_not_orphaned(
    tmp_path: Path,
) -> None:
    """The same rule on what is not this case: slime PR#2015's pause stuck in its drain on an
    engine that its counters call paused (demo offload_pause_stuck), and the orphaned pause
    without the stacks (`transforms.bundle_without_sources`): no caller is seen waiting."""
    paused = diagnosed(unpacked("offload_pause_stuck", tmp_path / "paused")).verdict
    assert any(f.rule == "engine-paused" for f in paused.findings)
    assert not _orphaned_pause(paused)
    root = unpacked("update_pause_orphaned", tmp_path / "src")
    stackless = frozenset({"pyspy", "dashboard_traceback"})
    blind = tf.bundle_without_sources(root, tmp_path / "ns", stackless)
    assert not _orphaned_pause(diagnosed(blind).verdict)
