"""Parsers of SGLang / router HTTP answers: stand-in captures and the shapes documented in sglang.md."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slime_hangdoctor.errors import ParseError
from slime_hangdoctor.parsers.sglang import (
    EngineLoad,
    RouterWorker,
    RouterWorkers,
    parse_loads,
    parse_metrics,
    parse_model_info,
    parse_server_info,
    parse_workers,
)
from tests.fixtures import transforms as tf

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "sglang"


def fixture(name: str) -> bytes:
    return (FIX / name).read_bytes()


# --------------------------------------------------------------------------- sglang.md §2 / §6 examples
# Copied as written in shared/reference/sglang.md; only the "..." elisions are dropped.

SPEC_SERVER_INFO = (
    '{"model_path": "...", "tp_size": 2, "max_total_num_tokens": 812345, "internal_states": '
    '[{"last_gen_throughput": 1234.5, "memory_usage": {"weight": 15.2, "kvcache": 40.1, '
    '"token_capacity": 812345, "graph": 1.1}}], "version": "0.5.15.post1"}'
)
SPEC_GET_LOAD_0515 = (
    '[{"dp_rank": 0, "num_reqs": 5, "num_waiting_reqs": 2, "num_tokens": 900, '
    '"num_pending_tokens": 100, "ts_tic": 1.0}]'
)
SPEC_WORKERS = (
    '{"workers": [{"id": "w1", "url": "http://10.0.0.1:15000", "model_id": "m", "priority": 50, '
    '"cost": 1.0, "worker_type": "regular", "is_healthy": true, "load": 0, "connection_mode": '
    '"http"}], "total": 1, "stats": {"prefill_count": 0, "decode_count": 0, "regular_count": 1}}'
)


def test_spec_server_info_example() -> None:
    info = parse_server_info(SPEC_SERVER_INFO)
    assert info.internal_states_count == 1
    assert not info.empty_internal_states
    assert info.tp_size == 2
    assert info.version == "0.5.15.post1"
    assert info.last_gen_throughput == pytest.approx(1234.5)


def test_spec_slime_patch_empty_internal_states_means_unresponsive() -> None:
    body = tf.set_json_path(SPEC_SERVER_INFO, ("internal_states",), [])
    info = parse_server_info(body)
    assert info.internal_states_count == 0
    assert info.empty_internal_states
    assert info.last_gen_throughput is None


def test_spec_get_load_list_counts_running_as_reqs_minus_waiting() -> None:
    assert parse_loads(SPEC_GET_LOAD_0515) == EngineLoad(running=3, waiting=2, ranks=1)


def test_spec_legacy_load_form_is_a_lower_bound() -> None:
    assert parse_loads('{"load": 812}') == EngineLoad(running=1, waiting=0)
    assert parse_loads('{"load": 0}') == EngineLoad(running=0, waiting=0)


def test_spec_v1_loads_sums_dp_ranks() -> None:
    body = (
        '{"timestamp": "2026-01-01T00:00:00", "version": "0.5.15", "loads": ['
        '{"dp_rank": 0, "num_running_reqs": 4, "num_waiting_reqs": 1, "gen_throughput": 10.0},'
        '{"dp_rank": 1, "num_running_reqs": 2, "num_waiting_reqs": 0, "gen_throughput": 5.5}]}'
    )
    assert parse_loads(body) == EngineLoad(
        running=6, waiting=1, gen_throughput=15.5, ranks=2, version="0.5.15"
    )


def test_spec_weight_version_patch_body() -> None:
    info = parse_model_info('{"weight_version": "12"}')
    assert info.weight_version == "12"
    assert info.model_path is None


def test_spec_router_workers_and_list_workers() -> None:
    assert parse_workers(SPEC_WORKERS) == RouterWorkers(
        ("http://10.0.0.1:15000",),
        "workers",
        (RouterWorker("http://10.0.0.1:15000", is_healthy=True, load=0),),
    )
    old = parse_workers('{"urls": ["http://a:1", "http://b:2"]}')
    assert old == RouterWorkers(("http://a:1", "http://b:2"), "list_workers")


# --------------------------------------------------------------------------- stand-in captures


def test_captured_server_info_healthy_and_stuck() -> None:
    healthy = parse_server_info(fixture("server_info.json"))
    assert healthy.internal_states_count == 1
    assert healthy.version == "0.5.15.post1"
    assert healthy.model_path == "demo/model"
    assert healthy.tp_size == 1 and healthy.dp_size == 1
    assert healthy.weight_version == "default"
    assert healthy.port is not None
    stuck = parse_server_info(fixture("server_info_stuck.json"))
    assert stuck.empty_internal_states
    assert stuck.version == "0.5.15.post1"


def test_captured_model_info_and_weight_version() -> None:
    info = parse_model_info(fixture("model_info.json"))
    assert (info.model_path, info.weight_version, info.is_generation) == (
        "demo/model",
        "default",
        True,
    )
    assert parse_model_info(fixture("get_weight_version.json")).weight_version == "default"


def test_captured_loads() -> None:
    idle_load = parse_loads(fixture("v1_loads_idle.json"))
    assert idle_load == EngineLoad(0, 0, 0.0, ranks=1, version="0.5.15.post1")
    busy = parse_loads(fixture("v1_loads_busy.json"))
    assert busy.running == 2 and busy.waiting == 0
    assert busy.gen_throughput is not None and busy.gen_throughput > 0
    assert parse_loads(fixture("get_load_busy.json")) == EngineLoad(running=2, waiting=0, ranks=1)
    stuck = parse_loads(fixture("v1_loads_stuck.json"))
    assert stuck.running == 1


def test_captured_loads_second_dp_rank_doubles() -> None:
    busy = parse_loads(fixture("v1_loads_busy.json"))
    doubled = parse_loads(tf.sglang_second_dp_rank(fixture("v1_loads_busy.json").decode()))
    assert doubled.running == 2 * busy.running
    assert doubled.gen_throughput == pytest.approx(2 * (busy.gen_throughput or 0))


def test_captured_metrics_series() -> None:
    idle = parse_metrics(fixture("metrics_idle.txt"))
    assert idle.decode_tokens_total == 0.0
    assert idle.generation_tokens_total == 0.0
    assert idle.requests_total == 0.0
    after = parse_metrics(fixture("metrics_after.txt"))
    assert after.requests_total == 3.0
    assert after.generation_tokens_total is not None and after.generation_tokens_total > 0
    # Prefill yields each request's first token; decode steps yield the rest.
    assert after.decode_tokens_total == after.generation_tokens_total - 3
    assert after.prefill_tokens_total == 3 * 32
    assert after.prompt_tokens_total == 3 * 32
    assert after.forward_seconds_total is not None and after.forward_seconds_total > 0
    assert after.running_reqs is not None and after.queue_reqs == 0.0
    assert after.paused_reqs == 0.0
    assert after.weight_load_seconds == {}


def test_captured_metrics_stuck_has_running_but_no_decode() -> None:
    stuck = parse_metrics(fixture("metrics_stuck.txt"))
    assert stuck.running_reqs == 1.0
    assert stuck.decode_tokens_total == 0.0
    assert stuck.generation_tokens_total == 0.0


def test_metrics_label_sets_are_summed() -> None:
    text = fixture("metrics_after.txt").decode()
    one = parse_metrics(text)
    both = parse_metrics(tf.prom_merge(text, tf.prom_add_label(text, "dp_rank", "1")))
    assert both.decode_tokens_total == 2 * (one.decode_tokens_total or 0)
    assert both.running_reqs == 2 * (one.running_reqs or 0)
    assert both.requests_total == 2 * (one.requests_total or 0)


def test_metrics_without_realtime_counter_is_none_not_zero() -> None:
    text = tf.prom_drop_family(fixture("metrics_after.txt").decode(), "sglang:realtime_tokens")
    metrics = parse_metrics(text)
    assert metrics.decode_tokens_total is None
    assert metrics.prefill_tokens_total is None
    assert metrics.generation_tokens_total is not None


def test_metrics_weight_load_by_source() -> None:
    text = fixture("metrics_after.txt").decode()
    text += (
        "# HELP sglang:weight_load_duration_seconds Duration of the last weight load.\n"
        "# TYPE sglang:weight_load_duration_seconds gauge\n"
        'sglang:weight_load_duration_seconds{model_name="m",source="distributed"} 1.5\n'
        'sglang:weight_load_duration_seconds{model_name="m",source="tensor"} 0.25\n'
    )
    assert parse_metrics(text).weight_load_seconds == {"distributed": 1.5, "tensor": 0.25}


def test_metrics_bytes_and_str_agree() -> None:
    raw = fixture("metrics_busy.txt")
    assert parse_metrics(raw) == parse_metrics(raw.decode())


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("name", "parser"),
    [
        ("server_info.json", parse_server_info),
        ("model_info.json", parse_model_info),
        ("v1_loads_busy.json", parse_loads),
        ("get_load_busy.json", parse_loads),
    ],
)
def test_truncated_json_raises_parse_error(name: str, parser: object) -> None:
    raw = fixture(name)
    with pytest.raises(ParseError):
        parser(tf.truncate_bytes_at(raw, len(raw) // 2))  # type: ignore[operator]


@pytest.mark.parametrize(
    "parser", [parse_server_info, parse_model_info, parse_loads, parse_workers, parse_metrics]
)
def test_invalid_utf8_and_empty_raise_parse_error(parser: object) -> None:
    with pytest.raises(ParseError):
        parser(tf.insert_invalid_utf8(fixture("model_info.json"), 10))  # type: ignore[operator]
    if parser is not parse_metrics:
        with pytest.raises(ParseError):
            parser(b"")  # type: ignore[operator]


def test_wrong_types_raise_parse_error() -> None:
    info = fixture("server_info.json").decode()
    with pytest.raises(ParseError, match="internal_states"):
        parse_server_info(tf.set_json_path(info, ("internal_states",), "timeout"))
    loads = fixture("v1_loads_busy.json").decode()
    with pytest.raises(ParseError, match="num_running_reqs"):
        parse_loads(tf.set_json_path(loads, ("loads", 0, "num_running_reqs"), "many"))
    with pytest.raises(ParseError):
        parse_loads(tf.set_json_path(loads, ("loads",), {"dp_rank": 0}))
    with pytest.raises(ParseError, match="url"):
        parse_workers(tf.drop_json_key(SPEC_WORKERS, "url"))


def test_other_json_answers_are_rejected() -> None:
    with pytest.raises(ParseError):
        parse_model_info('{"error": "Unauthorized"}')
    with pytest.raises(ParseError):
        parse_server_info('{"detail": "Not Found"}')
    with pytest.raises(ParseError):
        parse_loads('{"detail": "Not Found"}')
    with pytest.raises(ParseError):
        parse_workers(fixture("model_info.json"))
    with pytest.raises(ParseError):
        parse_server_info("[1, 2]")


def test_server_info_without_internal_states_is_unknown_not_unresponsive() -> None:
    body = tf.drop_json_key(fixture("server_info.json").decode(), "internal_states")
    info = parse_server_info(body)
    assert info.internal_states_count is None
    assert not info.empty_internal_states


@pytest.mark.parametrize(
    "text", ["Not Found", '{"detail":"Not Found"}', "<html><body>502</body></html>"]
)
def test_metrics_not_prometheus_raises(text: str) -> None:
    with pytest.raises(ParseError, match="metrics"):
        parse_metrics(text)


def test_metrics_empty_page_gives_nones() -> None:
    empty = parse_metrics("")
    assert empty.decode_tokens_total is None and empty.running_reqs is None


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=300))
def test_fuzz_only_parse_error(data: bytes) -> None:
    for parser in (parse_server_info, parse_model_info, parse_loads, parse_workers, parse_metrics):
        try:
            parser(data)
        except ParseError:
            pass


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=0, max_value=2400))
def test_fuzz_truncated_real_body(n: int) -> None:
    raw = fixture("server_info.json")
    try:
        info = parse_server_info(tf.truncate_bytes_at(raw, n))
    except ParseError:
        return
    assert n >= len(raw.rstrip()) and info.internal_states_count == 1


def test_fixture_bodies_are_json() -> None:
    for path in FIX.glob("*.json"):
        json.loads(path.read_bytes())


# --------------------------------------------------------------------------- issue 18: real wheel


@pytest.mark.parametrize("version", ["0.5.15.post1", "0.5.23"])
def test_wheel_http_middleware_series_per_endpoint(version: str) -> None:
    """The HTTP middleware's series as the wheel's own code writes them (capture_wheel_http_metrics):
    during a paused sync, 2 /generate requests held at the pause gate and the broadcast call in
    flight; the /metrics request itself is in flight too."""
    paused = parse_metrics(fixture(f"metrics_http_paused_{version}.txt"))
    assert paused.http_active["/generate"] == 2
    assert paused.http_active["/update_weights_from_distributed"] == 1
    assert paused.http_active["/metrics"] == 1
    assert paused.http_requests["/pause_generation"] == 1
    assert paused.http_responses_ok["/pause_generation"] == 1
    assert "/continue_generation" not in paused.http_requests
    assert paused.http_responses_ok["/generate"] == 3
    assert paused.decode_tokens_total is None  # no scheduler series on this page
    resumed = parse_metrics(fixture(f"metrics_http_resumed_{version}.txt"))
    assert resumed.http_active["/generate"] == 0
    assert resumed.http_active["/update_weights_from_distributed"] == 0
    assert resumed.http_responses_ok["/continue_generation"] == 1
    assert resumed.http_responses_ok["/generate"] == 5


def test_http_series_summed_over_methods_and_only_2xx_responses_counted() -> None:
    page = fixture("metrics_http_paused_0.5.15.post1.txt").decode()
    put = page.replace('endpoint="/generate",method="POST"', 'endpoint="/generate",method="PUT"')
    merged = parse_metrics(tf.prom_merge(page, put))
    assert merged.http_active["/generate"] == 4
    failed = page.replace('status_code="200"', 'status_code="503"')
    assert parse_metrics(failed).http_responses_ok == {}


def test_v1_loads_without_any_rank_is_unknown_not_idle() -> None:
    """0.5.15's reader returns [] until it attached the scheduler's shared memory
    (load_snapshot.py:571-573), and v1_loads.py wraps that as `"loads": []`."""
    body = tf.set_json_path(fixture("v1_loads_idle.json").decode(), ("loads",), [])
    load = parse_loads(body)
    assert not load.known and load.ranks == 0
    assert (load.running, load.waiting) == (None, None)
    assert not parse_loads("[]").known  # /get_load over the same empty read
    assert parse_loads(fixture("v1_loads_idle.json")).known


def test_router_worker_health_and_load_kept_and_odd_values_unknown() -> None:
    doc = json.loads(SPEC_WORKERS)
    doc["workers"][0]["load"] = 3
    doc["workers"][0]["is_healthy"] = False
    (worker,) = parse_workers(json.dumps(doc)).workers
    assert (worker.is_healthy, worker.load) == (False, 3)
    odd = tf.set_json_path(SPEC_WORKERS, ("workers", 0, "load"), "many")
    odd = tf.set_json_path(odd, ("workers", 0, "is_healthy"), "yes")
    (worker,) = parse_workers(odd).workers
    assert (worker.is_healthy, worker.load) == (None, None)
    assert parse_workers('{"urls": ["http://a:1"]}').workers == ()
