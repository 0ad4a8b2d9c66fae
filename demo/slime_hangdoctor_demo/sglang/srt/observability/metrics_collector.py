"""`/metrics` of the stand-in: Prometheus text with SGLang 0.5.15's metric names and labels
(as `sglang/srt/observability/metrics_collector.py`). Gauges and counters come from the scheduler's
last published Prometheus values (after every batch and gauge refresh, not at the LoadSnapshot's
cadence), tokenizer counters from the TokenizerManager."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from slime_hangdoctor_demo.sglang.srt.managers.tokenizer_manager import TokenizerManager

Msg = dict[str, Any]


def device_timer_enabled() -> bool:
    """`SGLANG_ENABLE_METRICS_DEVICE_TIMER` (a bool env of environ.py, default False)."""
    value = os.getenv("SGLANG_ENABLE_METRICS_DEVICE_TIMER", "false").strip().lower()
    return value in ("1", "true", "yes", "on")


def render_metrics(tm: TokenizerManager) -> str:
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
    )

    snap = tm.scheduler_metrics
    sched_labels = ["model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank"]
    sched_values = [tm.served_model_name, "unified", "0", "0", "0"]
    tok_labels, tok_values = ["model_name", "engine_type"], [tm.served_model_name, "unified"]
    families: list[Any] = []

    gauges: Msg = dict(snap.get("gauges") or {})
    gauge_help = {
        "num_running_reqs": "The number of running requests.",
        "num_queue_reqs": "The number of requests in the waiting queue.",
        "num_grammar_queue_reqs": "The number of requests in the grammar waiting queue.",
        "gen_throughput": "The generation throughput (token/s).",
        "token_usage": "The token usage.",
        "num_used_tokens": "The number of used tokens.",
        "cache_hit_rate": "The prefix cache hit rate.",
        "utilization": "The utilization.",
        "num_retracted_reqs": "The number of retracted requests.",
        "num_paused_reqs": "The number of paused requests by async weight sync.",
        "max_total_num_tokens": "Maximum total number of tokens in the KV cache pool.",
        "is_cuda_graph": "Whether the batch is using CUDA graph.",
        "new_token_ratio": "The new token ratio.",
        "kv_used_tokens": "The number of used KV cache tokens.",
        "kv_available_tokens": "The number of available KV cache tokens.",
    }
    for name, help_text in gauge_help.items():
        g = GaugeMetricFamily(f"sglang:{name}", help_text, labels=sched_labels)
        g.add_metric(sched_values, float(gauges.get(name, 0.0)))
        families.append(g)
    for queue in ("prefill_bootstrap", "prefill_inflight", "decode_prealloc", "decode_transfer"):
        g = GaugeMetricFamily(
            f"sglang:num_{queue}_queue_reqs",
            f"The number of requests in the {queue} queue.",
            labels=sched_labels,
        )
        g.add_metric(sched_values, 0.0)
        families.append(g)
    durations: Msg = dict(snap.get("weight_load_duration") or {})
    if durations:
        g = GaugeMetricFamily(
            "sglang:weight_load_duration_seconds",
            "Duration of the last weight load, by source.",
            labels=[*sched_labels, "source"],
        )
        for source, secs in sorted(durations.items()):
            g.add_metric([*sched_values, source], float(secs))
        families.append(g)

    # 0.5.15.post1 metrics_collector.py:1203-1217: a realtime series (one per mode label) is made
    # by its first `.labels(mode=...).inc(n)` with n > 0, so a mode that never counted (or an
    # engine that never decoded) has no series at all, not a 0.
    realtime: Msg = dict(snap.get("realtime_tokens") or {})
    counted = [m for m in ("prefill_compute", "prefill_cache", "decode") if realtime.get(m)]
    if counted:
        c = CounterMetricFamily(
            "sglang:realtime_tokens",
            "Realtime token counts by mode.",
            labels=[*sched_labels, "mode"],
        )
        for mode in counted:
            c.add_metric([*sched_values, mode], float(realtime[mode]))
        families.append(c)
    # The forward timer exists only with SGLANG_ENABLE_METRICS_DEVICE_TIMER (off by default,
    # 0.5.15.post1 environ.py:792).
    if device_timer_enabled():
        c = CounterMetricFamily(
            "sglang:forward_execution_seconds",
            "Seconds spent in forward passes.",
            labels=sched_labels,
        )
        c.add_metric(sched_values, float(snap.get("forward_execution_seconds") or 0.0))
        families.append(c)
    c = CounterMetricFamily(
        "sglang:cuda_graph_passes", "Forward passes that used a CUDA graph.", labels=sched_labels
    )
    c.add_metric(sched_values, 0.0)
    families.append(c)

    with tm._lock:
        counters = dict(tm.counters)
        latencies = list(tm.e2e_latency)
        http_requests = dict(tm.http_requests)
        http_responses = dict(tm.http_responses)
        http_active = dict(tm.http_active)
    # The HTTP middleware's families (0.5.15.post1 utils/common.py:2316-2340), no model labels.
    c = CounterMetricFamily(
        "sglang:http_requests",
        "Total number of HTTP requests by endpoint and method",
        labels=["endpoint", "method"],
    )
    for (endpoint, method), value in sorted(http_requests.items()):
        c.add_metric([endpoint, method], value)
    families.append(c)
    c = CounterMetricFamily(
        "sglang:http_responses",
        "Total number of HTTP responses by endpoint and status code",
        labels=["endpoint", "method", "status_code"],
    )
    for (endpoint, method, status), value in sorted(http_responses.items()):
        c.add_metric([endpoint, method, status], value)
    families.append(c)
    g = GaugeMetricFamily(
        "sglang:routing_keys_active", "Number of unique routing keys with active requests"
    )
    g.add_metric([], 0.0)
    families.append(g)
    g = GaugeMetricFamily(
        "sglang:http_requests_active",
        "Number of currently active HTTP requests",
        labels=["endpoint", "method"],
    )
    for (endpoint, method), value in sorted(http_active.items()):
        g.add_metric([endpoint, method], value)
    families.append(g)
    tok_help = {
        "prompt_tokens": "Number of prefill tokens processed.",
        "generation_tokens": "Number of generation tokens processed.",
        "num_requests": "Number of requests processed.",
        "cached_tokens": "Number of cached prompt tokens.",
        "num_aborted_requests": "Number of requests aborted.",
    }
    for name, help_text in tok_help.items():
        c = CounterMetricFamily(f"sglang:{name}", help_text, labels=tok_labels)
        c.add_metric(tok_values, counters[name])
        families.append(c)
    bounds = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
    buckets = [(str(b), float(sum(1 for x in latencies if x <= b))) for b in bounds]
    buckets.append(("+Inf", float(len(latencies))))
    h = HistogramMetricFamily(
        "sglang:e2e_request_latency_seconds",
        "Histogram of end-to-end request latency in seconds",
        labels=tok_labels,
    )
    h.add_metric(tok_values, buckets, sum(latencies))
    families.append(h)

    class _Collector:
        def collect(self) -> Iterator[Any]:
            yield from families

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector())
    return str(generate_latest(registry).decode("utf-8"))
