"""Pure parsers for SGLang engine and router HTTP answers (shapes as in reference/sglang.md §2, §6).

Each function takes the raw body of one answer and returns one fact, or raises `ParseError` saying
why. Nothing here does I/O. Shapes handled:

- `/server_info`, `/get_server_info`: one flat JSON object (server args + scheduler info +
  `internal_states` + `version`). slime's patch answers `internal_states: []` when the scheduler did
  not reply within `SGLANG_SERVER_INFO_TIMEOUT` (2 s) -- and, on 0.5.15, on every later call once
  one call timed out (the endpoint is poisoned): the parser only records the empty list; what it
  means is decided in analysis/readers/sglang_http.py together with the progress counters.
- `/model_info`, `/get_model_info` (and slime's `/get_weight_version`, which carries only
  `weight_version`).
- `/v1/loads` (`{"loads": [...]}`, one entry per DP rank; `[]` = not attached, unknown), 0.5.15's
  `/get_load` list form, and the <=0.5.2 `{"load": N}` form.
- `/metrics`: Prometheus text, read with prometheus_client's parser; label sets are summed, except
  the HTTP middleware's series, kept per `endpoint` label.
- router `GET /workers` (`{"workers": [{"url", "is_healthy", "load", ...}]}`) and the older
  `GET /list_workers` (`{"urls": [...]}`).
- the router's Prometheus page (its `--prometheus-port`): `smg_worker_requests_active{worker}` and
  `smg_http_connections_active` (sgl-router 0.3.2's names).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from slime_hangdoctor.bundle import ProbeRecord
from slime_hangdoctor.errors import ParseError
from slime_hangdoctor.outcome import Outcome
from slime_hangdoctor.parsers.json_text import load_json, meta_int
from slime_hangdoctor.source_spec import Facts, Join, SourceSpec

# the sources' names: the `source` of their probe records, the folders of their artefacts under raw/
SGLANG = "sglang"  # one HTTP answer of an engine; meta: url, path, status, elapsed_s, error
ROUTER = "router"  # one HTTP answer of a router; meta as SGLANG

__all__ = [
    "ENGINE_ENDPOINTS",
    "HTTP_ONLY_PATHS",
    "PARSER_BY_PATH",
    "RECOVERING_VERSION",
    "ROUTER_ENDPOINTS",
    "ROUTER_METRICS_ENDPOINTS",
    "ROUTER_PARSER_BY_PATH",
    "STEP_COUNTERS",
    "WORK_COUNTERS",
    "HttpEndpoint",
    "counter_rises",
    "parse_loads",
    "parse_metrics",
    "parse_metrics_page",
    "parse_model_info",
    "parse_router_metrics",
    "parse_server_info",
    "parse_workers",
    "version_tuple",
]


# The first SGLang release whose queueing communicator recovers from a cancelled `/server_info`
# call (0.5.23 serialises the calls with an asyncio.Lock). Before it, one call that timed out under
# slime's 2 s patch leaves `_result_event` set (0.5.15.post1 managers/communicator.py:38-58) and
# every later call answers `internal_states: []`.
RECOVERING_VERSION = (0, 5, 23)

# Endpoints the HTTP process answers by itself, without the scheduler (0.5.15.post1: the tokenizer's
# own state, the shared-memory load snapshot, the Prometheus files). A request in flight at any other
# endpoint (`sglang:http_requests_active`) is work the scheduler holds or will hold.
HTTP_ONLY_PATHS = frozenset(
    {
        "/metrics",
        "/model_info",
        "/get_model_info",
        "/v1/models",
        "/v1/loads",
        "/get_load",
        "/ready",
        "/ping",
        "/get_weight_version",
        "/weight_version",
    }
)


# --------------------------------------------------------------------------- facts
# Observed facts of HTTP answers: SGLang engines' and the sgl-router's (shapes in
# reference/sglang.md §2, §6). Frozen, I/O-free, no verdicts.


@dataclass(frozen=True)
class HttpAnswer:
    """One HTTP request a probe made. The body itself stays in the bundle's raw artefact."""

    url: str  # base URL of the server, e.g. http://10.0.0.1:15000
    path: str  # e.g. /server_info
    status: int | None  # None: no HTTP answer (refused, timeout, reset)
    elapsed_s: float
    # How the probe ended, as the collector typed it (the bundle's ProbeRecord.outcome): the analysis
    # decides "timed out" / "refused" on this, never on the error text. A body that stalled after
    # its headers is TIMED_OUT with a status.
    outcome: Outcome
    error: str | None = None  # for the reader: "connection refused", "timed out after 2.0s", ...
    # False: the collector chose not to send it (`/server_info` on an engine whose version lets a
    # timed-out call poison it, while another read showed its scheduler busy or silent)
    sent: bool = True


@dataclass(frozen=True)
class ServerInfo:
    """`/server_info` or `/get_server_info`."""

    # 0: slime's patch answered `internal_states: []` (no scheduler reply within 2 s, or an earlier
    # timed-out call poisoned the endpoint on 0.5.15: see analysis/readers/sglang_http.py); None: key absent
    internal_states_count: int | None
    version: str | None = None
    port: int | None = None
    tp_size: int | None = None
    dp_size: int | None = None
    model_path: str | None = None
    last_gen_throughput: float | None = None
    weight_version: str | None = None

    @property
    def empty_internal_states(self) -> bool:
        """slime's patch answered `internal_states: []`: alone this proves nothing (see engines)."""
        return self.internal_states_count == 0


@dataclass(frozen=True)
class ModelInfo:
    model_path: str | None
    weight_version: str | None = None
    is_generation: bool | None = None


@dataclass(frozen=True)
class EngineLoad:
    """`/v1/loads` summed over DP ranks (or the older `/get_load`).

    `running`/`waiting` are None when no DP rank reported: 0.5.15 answers `{"loads": []}` while the
    tokenizer has not attached the scheduler's shared-memory snapshot (load_snapshot.py:571-573), or
    no rank has published yet. That is unknown, never idle."""

    running: int | None
    waiting: int | None
    gen_throughput: float | None = None
    tokens: int | None = None  # <=0.5.2 `/get_load` reports only a token count
    ranks: int | None = None  # DP-rank entries in the answer; None for the `{"load": N}` form
    version: str | None = None  # the engine's SGLang version (`/v1/loads` carries it, >=0.5.9)

    @property
    def known(self) -> bool:
        return self.running is not None and self.waiting is not None


@dataclass(frozen=True)
class SglangMetrics:
    """The progress-relevant series of one `/metrics` answer (sums over label sets)."""

    decode_tokens_total: float | None = None  # sglang:realtime_tokens_total{mode="decode"}
    prefill_tokens_total: float | None = (
        None  # realtime_tokens_total prefill_compute + prefill_cache
    )
    generation_tokens_total: float | None = None
    prompt_tokens_total: float | None = None
    forward_seconds_total: float | None = None
    requests_total: float | None = None
    running_reqs: float | None = None
    queue_reqs: float | None = None
    paused_reqs: float | None = None
    gen_throughput: float | None = None
    weight_load_seconds: Mapping[str, float] = field(default_factory=dict)
    # The HTTP middleware's series (utils/common.py:2316-2328 in 0.5.15, observability/
    # http_request_metrics.py in 0.5.23), keyed by the `endpoint` label (the route path), summed
    # over `method` (and `status_code`). Empty when the page has none of them (SGLang < 0.5.9).
    http_active: Mapping[str, float] = field(default_factory=dict)  # http_requests_active
    http_requests: Mapping[str, float] = field(default_factory=dict)  # http_requests_total
    http_responses_ok: Mapping[str, float] = field(default_factory=dict)  # 2xx responses_total


@dataclass(frozen=True)
class RouterWorker:
    """One entry of the router's `GET /workers`."""

    url: str
    is_healthy: bool | None = None  # the router's own health view (stale when its checks are off)
    load: int | None = None  # the router's in-flight request count for this worker


@dataclass(frozen=True)
class RouterWorkers:
    urls: tuple[str, ...]
    api: str = "workers"  # workers | list_workers
    workers: tuple[RouterWorker, ...] = ()  # `/workers` entries; empty for `/list_workers`


@dataclass(frozen=True)
class RouterMetrics:
    """The sgl-router's Prometheus page (its `--prometheus-port`, not its HTTP port; the `smg_*`
    families of sgl-router 0.3), the series that say where requests are."""

    # smg_worker_requests_active{worker=URL}: requests the router has sent to that worker and not
    # had answered
    requests_active: Mapping[str, float] = field(default_factory=dict)
    connections_active: float | None = None  # smg_http_connections_active: clients' connections


def version_tuple(text: str | None) -> tuple[int, ...] | None:
    """'0.5.15.post1' -> (0, 5, 15); None when there is no leading dotted number."""
    match = re.match(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    if match is None:
        return None
    return tuple(int(g) for g in match.groups(default="0"))


# --------------------------------------------------------------------------- small helpers


def _text(body: bytes | str, what: str) -> str:
    if isinstance(body, str):
        return body
    if not isinstance(body, (bytes, bytearray, memoryview)):
        raise ParseError(f"{what}: expected bytes or str, got {type(body).__name__}")
    try:
        return bytes(body).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ParseError(f"{what}: body is not UTF-8 ({exc.reason} at byte {exc.start})") from exc


def _json(body: bytes | str, what: str) -> Any:
    return load_json(body, what)


def _object(body: bytes | str, what: str) -> dict[str, Any]:
    data = _json(body, what)
    if not isinstance(data, dict):
        raise ParseError(f"{what}: expected a JSON object, got {type(data).__name__}")
    return data


def _opt_str(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return None


def _opt_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return None
    return None


def _opt_float(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    return None


def _count(value: Any, field: str, what: str) -> int:
    number = _opt_int(value)
    if number is None or number < 0:
        raise ParseError(f"{what}: {field} is not a non-negative integer: {value!r}")
    return number


# --------------------------------------------------------------------------- /server_info


def parse_server_info(body: bytes | str) -> ServerInfo:
    """`/server_info` or `/get_server_info` -> ServerInfo.

    `internal_states_count` is None when the key is absent (stock SGLang always has it, so absence
    means an unknown shape), 0 for slime's patch's `[]` form. `last_gen_throughput` is summed over
    DP ranks. `weight_version` is the server-args field: the current one on 0.5.15 (the tokenizer
    updates `server_args.weight_version`), the startup one on 0.5.23 (http_server.py:863-873, which
    sends readers to `/model_info`); analysis/readers/sglang_http.py never lets it override `/model_info`'s.
    """
    what = "server_info"
    data = _object(body, what)
    states = data.get("internal_states")
    count: int | None = None
    throughput: float | None = None
    if states is not None:
        if not isinstance(states, list):
            raise ParseError(f"{what}: internal_states is not a list: {type(states).__name__}")
        count = len(states)
        values = [
            _opt_float(s.get("last_gen_throughput")) for s in states if isinstance(s, Mapping)
        ]
        known = [v for v in values if v is not None]
        throughput = sum(known) if known else None
    if count is None and "model_path" not in data and "version" not in data:
        raise ParseError(f"{what}: none of internal_states, model_path, version present")
    return ServerInfo(
        internal_states_count=count,
        version=_opt_str(data.get("version")),
        port=_opt_int(data.get("port")),
        tp_size=_opt_int(data.get("tp_size")),
        dp_size=_opt_int(data.get("dp_size")),
        model_path=_opt_str(data.get("model_path")),
        last_gen_throughput=throughput,
        weight_version=_opt_str(data.get("weight_version")),
    )


# --------------------------------------------------------------------------- /model_info


def parse_model_info(body: bytes | str) -> ModelInfo:
    """`/model_info`, `/get_model_info` (or slime's `/get_weight_version`) -> ModelInfo."""
    what = "model_info"
    data = _object(body, what)
    if not any(k in data for k in ("model_path", "weight_version", "is_generation")):
        keys = ", ".join(sorted(map(str, data))[:5]) or "nothing"
        raise ParseError(f"{what}: no model_path / weight_version / is_generation (has {keys})")
    generation = data.get("is_generation")
    return ModelInfo(
        model_path=_opt_str(data.get("model_path")),
        weight_version=_opt_str(data.get("weight_version")),
        is_generation=generation if isinstance(generation, bool) else None,
    )


# --------------------------------------------------------------------------- /v1/loads, /get_load


def parse_loads(body: bytes | str) -> EngineLoad:
    """`/v1/loads`, `/get_load` (0.5.15 list form) or `{"load": N}` (<=0.5.2) -> EngineLoad.

    Running and waiting requests are summed over DP ranks. The 0.5.15 `/get_load` entries count
    `num_reqs` = running + waiting. The <=0.5.2 form only gives a token count, so it yields a lower
    bound: `running` is 1 when tokens are in use and 0 when none are, `waiting` is 0. An empty list
    (`{"loads": []}` or `[]`: 0.5.15's reader has not attached the scheduler's shared memory, or no
    rank has published, `managers/load_snapshot.py:571-573`) gives running/waiting None: unknown.
    """
    what = "loads"
    data = _json(body, what)
    if isinstance(data, list):
        return _get_load_list(data, what)
    if not isinstance(data, dict):
        raise ParseError(f"{what}: expected a JSON object or list, got {type(data).__name__}")
    if "loads" in data:
        loads = data["loads"]
        if not isinstance(loads, list):
            raise ParseError(f"{what}: 'loads' is not a list")
        return _v1_loads(loads, what, _opt_str(data.get("version")))
    if "load" in data:
        tokens = _count(data["load"], "load", what)
        return EngineLoad(running=1 if tokens > 0 else 0, waiting=0)
    raise ParseError(f"{what}: no 'loads' list and no 'load' value")


def _entries(items: list[Any], what: str) -> list[Mapping[str, Any]]:
    entries = [x for x in items if isinstance(x, Mapping)]
    if len(entries) != len(items):
        raise ParseError(f"{what}: a load entry is not an object")
    return entries


def _v1_loads(items: list[Any], what: str, version: str | None = None) -> EngineLoad:
    if not items:
        return EngineLoad(running=None, waiting=None, ranks=0, version=version)
    running = waiting = 0
    throughputs: list[float] = []
    for entry in _entries(items, what):
        if "num_running_reqs" not in entry and "num_waiting_reqs" not in entry:
            raise ParseError(
                f"{what}: a load entry has neither num_running_reqs nor num_waiting_reqs"
            )
        running += _count(entry.get("num_running_reqs", 0), "num_running_reqs", what)
        waiting += _count(entry.get("num_waiting_reqs", 0), "num_waiting_reqs", what)
        value = _opt_float(entry.get("gen_throughput"))
        if value is not None:
            throughputs.append(value)
    return EngineLoad(
        running=running,
        waiting=waiting,
        gen_throughput=sum(throughputs) if throughputs else None,
        ranks=len(items),
        version=version,
    )


def _get_load_list(items: list[Any], what: str) -> EngineLoad:
    if not items:
        return EngineLoad(running=None, waiting=None, ranks=0)
    running = waiting = 0
    for entry in _entries(items, what):
        if "num_reqs" not in entry:
            raise ParseError(f"{what}: a /get_load entry has no num_reqs")
        total = _count(entry["num_reqs"], "num_reqs", what)
        queued = _count(entry.get("num_waiting_reqs", 0), "num_waiting_reqs", what)
        running += max(total - queued, 0)
        waiting += queued
    return EngineLoad(running=running, waiting=waiting, ranks=len(items))


# --------------------------------------------------------------------------- /metrics

_SUMS: dict[str, str] = {
    "sglang:generation_tokens_total": "generation_tokens_total",
    "sglang:prompt_tokens_total": "prompt_tokens_total",
    "sglang:forward_execution_seconds_total": "forward_seconds_total",
    "sglang:num_requests_total": "requests_total",
    "sglang:num_running_reqs": "running_reqs",
    "sglang:num_queue_reqs": "queue_reqs",
    "sglang:num_paused_reqs": "paused_reqs",
    "sglang:gen_throughput": "gen_throughput",
}
_REALTIME = "sglang:realtime_tokens_total"
_PREFILL_MODES = ("prefill_compute", "prefill_cache")
_WEIGHT_LOAD = "sglang:weight_load_duration_seconds"
# The HTTP middleware's series (0.5.15 utils/common.py:2316-2328): sample name -> SglangMetrics field.
_HTTP_ACTIVE = "sglang:http_requests_active"
_HTTP_REQUESTS = "sglang:http_requests_total"
_HTTP_RESPONSES = "sglang:http_responses_total"


# SglangMetrics fields that only move when the engine does work (a forward pass, a finished request):
# the analysis compares them across samples, the watchdog keeps them as progress markers. Polling
# /metrics, /server_info or /v1/loads moves none of them.
WORK_COUNTERS: tuple[tuple[str, str], ...] = (
    ("decode_tokens_total", "decode tokens"),
    ("prefill_tokens_total", "prefill tokens"),
    ("generation_tokens_total", "generated tokens"),
    ("prompt_tokens_total", "prompt tokens"),
    ("forward_seconds_total", "forward seconds"),
    ("requests_total", "finished requests"),
)
# Those of them that move on every scheduler step (`realtime_tokens_total` is incremented per decode
# step, metrics_reporter.py report_decode_stats): flat over a window means no step ran. The others
# move only when a request finishes, so a flat one proves nothing.
STEP_COUNTERS = frozenset({"decode_tokens_total", "prefill_tokens_total", "forward_seconds_total"})


def counter_rises(first: SglangMetrics, last: SglangMetrics) -> tuple[str, ...]:
    """The work counters that rose from `first` to `last`, in WORK_COUNTERS order, each as its label
    and rise ("decode tokens +120"): the analysis's progress and the watchdog's counters-only look
    say it in the same words."""
    rises: list[str] = []
    for attr, label in WORK_COUNTERS:
        a, b = getattr(first, attr), getattr(last, attr)
        if a is not None and b is not None and b > a:
            rises.append(f"{label} +{b - a:g}")
    return tuple(rises)


def parse_metrics_page(body: bytes) -> SglangMetrics:
    """A kept `/metrics` body: bytes that are not UTF-8 are replaced rather than refused (one bad
    label value must not lose the page's counters); text that is not Prometheus still raises."""
    return parse_metrics(body.decode("utf-8", "replace"))


def parse_metrics(text: bytes | str) -> SglangMetrics:
    """`/metrics` Prometheus text -> SglangMetrics (each series summed over its label sets).

    Counters are matched by their exposed sample names (`..._total`). A page without any of the
    series gives an SglangMetrics of Nones; text that is not Prometheus exposition raises.

    The same page is asked for up to four times per run (the collector's check of the answer, the
    watchdog's did-anything-move look at each sample, the analysis): the last pages' results are
    kept, by content (prometheus_client's parser is pure Python, ~10 ms for a busy engine's page).
    """
    return _parse_metrics_text(_text(text, "metrics"))


@functools.lru_cache(maxsize=16)
def _parse_metrics_text(text: str) -> SglangMetrics:
    samples = _samples(text)
    sums: dict[str, float] = {}
    decode: float | None = None
    prefill: float | None = None
    weight_load: dict[str, float] = {}
    http: dict[str, dict[str, float]] = {"active": {}, "requests": {}, "ok": {}}
    for name, labels, value in samples:
        if name in _SUMS:
            key = _SUMS[name]
            sums[key] = sums.get(key, 0.0) + value
        elif name == _REALTIME:
            mode = labels.get("mode")
            if mode == "decode":
                decode = (decode or 0.0) + value
            elif mode in _PREFILL_MODES:
                prefill = (prefill or 0.0) + value
        elif name == _WEIGHT_LOAD:
            source = labels.get("source", "")
            weight_load[source] = weight_load.get(source, 0.0) + value
        elif name in (_HTTP_ACTIVE, _HTTP_REQUESTS, _HTTP_RESPONSES):
            _add_http(http, name, labels, value)
    return SglangMetrics(
        decode_tokens_total=decode,
        prefill_tokens_total=prefill,
        generation_tokens_total=sums.get("generation_tokens_total"),
        prompt_tokens_total=sums.get("prompt_tokens_total"),
        forward_seconds_total=sums.get("forward_seconds_total"),
        requests_total=sums.get("requests_total"),
        running_reqs=sums.get("running_reqs"),
        queue_reqs=sums.get("queue_reqs"),
        paused_reqs=sums.get("paused_reqs"),
        gen_throughput=sums.get("gen_throughput"),
        weight_load_seconds=weight_load,
        http_active=http["active"],
        http_requests=http["requests"],
        http_responses_ok=http["ok"],
    )


def _add_http(
    into: dict[str, dict[str, float]], name: str, labels: Mapping[str, str], value: float
) -> None:
    endpoint = labels.get("endpoint")
    if not endpoint:
        return
    if name == _HTTP_ACTIVE:
        key = "active"
    elif name == _HTTP_REQUESTS:
        key = "requests"
    elif labels.get("status_code", "").startswith("2"):
        key = "ok"
    else:
        return
    into[key][endpoint] = into[key].get(endpoint, 0.0) + value


def _samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError as exc:  # pragma: no cover - prometheus_client is a dependency
        raise ParseError(f"metrics: prometheus_client is not importable: {exc}") from exc
    out: list[tuple[str, dict[str, str], float]] = []
    try:
        families: Iterable[Any] = text_string_to_metric_families(text)
        for family in families:
            for sample in family.samples:
                value = float(sample.value)
                if math.isnan(value):
                    continue
                out.append((str(sample.name), dict(sample.labels), value))
    except ParseError:
        raise
    except Exception as exc:  # the parser raises ValueError, and IndexError/KeyError on odd input
        raise ParseError(f"metrics: not Prometheus text ({type(exc).__name__}: {exc})") from exc
    return out


# --------------------------------------------------------------------------- router workers


def parse_workers(body: bytes | str) -> RouterWorkers:
    """Router `GET /workers` or the older `GET /list_workers` -> RouterWorkers.

    `/workers` entries also carry `is_healthy` (the router's health view) and `load` (the router's
    count of requests in flight to that worker); a value of the wrong type is read as unknown."""
    what = "workers"
    data = _object(body, what)
    if "workers" in data:
        workers = data["workers"]
        if not isinstance(workers, list):
            raise ParseError(f"{what}: 'workers' is not a list")
        entries: list[RouterWorker] = []
        for worker in workers:
            url = worker.get("url") if isinstance(worker, Mapping) else None
            if not isinstance(worker, Mapping) or not isinstance(url, str) or not url:
                raise ParseError(f"{what}: a worker has no url: {worker!r:.80}")
            healthy = worker.get("is_healthy")
            load = _opt_int(worker.get("load"))
            entries.append(
                RouterWorker(
                    url=url,
                    is_healthy=healthy if isinstance(healthy, bool) else None,
                    load=load if load is not None and load >= 0 else None,
                )
            )
        return RouterWorkers(
            urls=tuple(w.url for w in entries), api="workers", workers=tuple(entries)
        )
    if "urls" in data:
        listed = data["urls"]
        if not isinstance(listed, list) or not all(isinstance(u, str) for u in listed):
            raise ParseError(f"{what}: 'urls' is not a list of strings")
        return RouterWorkers(urls=tuple(listed), api="list_workers")
    raise ParseError(f"{what}: neither 'workers' nor 'urls' present")


_ROUTER_ACTIVE = "smg_worker_requests_active"
_ROUTER_CONNECTIONS = "smg_http_connections_active"


def parse_router_metrics(body: bytes | str) -> RouterMetrics:
    """The router's Prometheus page -> RouterMetrics (names as sgl-router 0.3.2 exports them,
    recorded in tests/fixtures/analysis/router). A page with neither series (an engine's, another
    exporter's) raises: it is not the router's. As `parse_metrics`, the last pages' results are
    kept by content: the collector's check and the loader ask for the same page."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    return _parse_router_text(text)


@functools.lru_cache(maxsize=16)
def _parse_router_text(text: str) -> RouterMetrics:
    active: dict[str, float] = {}
    connections: float | None = None
    seen = False
    for name, labels, value in _samples(text):
        if name == _ROUTER_ACTIVE and labels.get("worker"):
            url = labels["worker"].rstrip("/")
            active[url] = active.get(url, 0.0) + value
            seen = True
        elif name == _ROUTER_CONNECTIONS:
            connections = (connections or 0.0) + value
            seen = True
    if not seen and "# TYPE smg_" not in text:
        raise ParseError(f"router metrics: no {_ROUTER_ACTIVE} or {_ROUTER_CONNECTIONS} series")
    return RouterMetrics(active, connections)


# --------------------------------------------------------------------------- the source's table

HttpParsed = ServerInfo | ModelInfo | EngineLoad | SglangMetrics | RouterWorkers | RouterMetrics


@dataclass(frozen=True)
class HttpEndpoint:
    """One thing the collector asks an engine or router, and how the loader reads the answer."""

    paths: tuple[str, ...]  # the newest name first; older names are tried in order on a 404
    parse: Callable[[bytes], HttpParsed] | None  # None: the status is the answer (body unread)
    suffix: str = ".json"  # of the artefact in the bundle
    status_answers: tuple[int, ...] = ()  # non-2xx statuses that are an answer, not a failure


ENGINE_ENDPOINTS: tuple[HttpEndpoint, ...] = (
    HttpEndpoint(("/model_info", "/get_model_info"), parse_model_info),
    HttpEndpoint(("/server_info", "/get_server_info"), parse_server_info),
    HttpEndpoint(("/v1/loads", "/get_load"), parse_loads),
    HttpEndpoint(("/metrics",), parse_metrics_page, ".txt"),
    # Flag checks in the HTTP process (no scheduler, no side effect): >=0.5.20 `/ready` is 503
    # while paused and 404 before; `/ping` is 200 on 0.5.15, 503 when unhealthy on 0.5.23.
    HttpEndpoint(("/ready",), None, ".txt", status_answers=(404, 503)),
    HttpEndpoint(("/ping",), None, ".txt", status_answers=(404, 503)),
)
ROUTER_ENDPOINTS: tuple[HttpEndpoint, ...] = (
    HttpEndpoint(("/workers", "/list_workers"), parse_workers),
)
# The router's Prometheus port (slime gives it one: `router_args.prometheus_port`), found among the
# router process's listening ports (its HTTP port answers 404 for /metrics).
ROUTER_METRICS_ENDPOINTS: tuple[HttpEndpoint, ...] = (
    HttpEndpoint(("/metrics",), parse_router_metrics, ".txt"),
)

# Derived: every path the collector may have stored -> its parser (the loader's dispatch), for an
# engine's records and for a router's (whose `/metrics` is its Prometheus page).
PARSER_BY_PATH: Mapping[str, Callable[[bytes], HttpParsed]] = {
    path: e.parse
    for e in (*ENGINE_ENDPOINTS, *ROUTER_ENDPOINTS)
    if e.parse is not None
    for path in e.paths
}
ROUTER_PARSER_BY_PATH: Mapping[str, Callable[[bytes], HttpParsed]] = {
    path: e.parse
    for e in (*ROUTER_ENDPOINTS, *ROUTER_METRICS_ENDPOINTS)
    if e.parse is not None
    for path in e.paths
}


class HttpPeer(str, Enum):
    """Whose HTTP answer: an SGLang engine's, a router's, or a server only a router lists (not
    one of the job's engines: topology.Engine.listed_only, probed without the API key)."""

    ENGINE = "engine"
    ROUTER = "router"
    LISTED = "listed"


Parsed = HttpParsed | None


@dataclass(frozen=True)
class HttpObs:
    """One HTTP answer of an engine or router, with its parsed body where it parsed."""

    kind: HttpPeer
    sample: int
    answer: HttpAnswer
    parsed: Parsed = None
    parse_error: str | None = None


def parse_answer(data: bytes | None, rec: ProbeRecord) -> HttpObs:
    """One answer, whatever its outcome (a refused connection, a timeout and a 503 are evidence
    too): what the record's meta says of it, and its body parsed by its path's parser where the
    answer was a 200 (a body that does not parse is kept as `parse_error`, never raised)."""
    meta = rec.meta
    path = str(meta.get("path") or "")
    answer = HttpAnswer(
        url=str(meta.get("url") or rec.target),
        path=path,
        status=meta_int(meta.get("status")),
        elapsed_s=_meta_float(meta.get("elapsed_s")) or rec.elapsed_s or 0.0,
        outcome=rec.outcome,
        error=meta.get("error") or (rec.reason if rec.outcome is not Outcome.OK else None),
        sent=meta.get("not_sent") is not True,
    )
    router = rec.source == ROUTER
    parser = (ROUTER_PARSER_BY_PATH if router else PARSER_BY_PATH).get(path)
    parsed: Parsed = None
    parse_error = None
    if parser is not None and data is not None and answer.status == 200:
        try:
            parsed = parser(data)
        except ParseError as exc:
            parse_error = str(exc)
        except Exception as exc:  # noqa: BLE001 - untrusted bytes: a blind spot, never a crash
            parse_error = f"{type(exc).__name__}: {exc}"[:300]
    kind = HttpPeer.ROUTER if router else HttpPeer.LISTED if _listed(rec) else HttpPeer.ENGINE
    return HttpObs(kind, rec.sample or 0, answer, parsed, parse_error)


def _listed(rec: ProbeRecord) -> bool:
    """An engine only a router lists (not the job's: topology.Engine.listed_only), probed
    without the API key (collect/sglang.py marks its records `listed_by_router`)."""
    return rec.source == SGLANG and rec.meta.get("listed_by_router") is True


def _notes(obs: HttpObs, rec: ProbeRecord) -> tuple[str, ...]:
    """An answer that did not end ok (but a fallback path's), and a body that did not parse.
    None for a server only a router lists: what it did not answer is no blind spot of the job
    (the verdict reports it: analysis/parts/routers.listed_findings)."""
    if obs.kind is HttpPeer.LISTED:
        return ()
    a = obs.answer
    out: list[str] = []
    if rec.outcome is not Outcome.OK and not rec.meta.get("fallback"):
        reason = f": {rec.reason}" if rec.reason else ""
        out.append(f"{rec.source} {a.url}{a.path}: {rec.outcome.value}{reason}")
    if obs.parse_error is not None:
        out.append(f"{rec.source} {a.url}{a.path}: could not parse: {obs.parse_error}")
    return tuple(out)


def _meta_float(value: Any) -> float | None:
    """A number of a record's meta, None where a damaged bundle holds anything else."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        number = float(value)
    except (ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


def _answers(facts: Facts) -> tuple[HttpObs, ...]:
    return tuple(obs.fact for obs in facts.facts_of(ENGINE_SPEC, ROUTER_SPEC))


# One HTTP answer of an engine / of a router (collect/sglang.py: 4 MiB a body), read whatever its
# outcome.
ENGINE_SPEC = SourceSpec[HttpObs](
    name=SGLANG,
    parse=None,
    parse_any=parse_answer,
    max_bytes=8 * 1024 * 1024,
    notes=_notes,
    analysis="slime_hangdoctor.analysis.parts.engines",
)
# A router answers as an engine does, and names the engines: discovery reads it.
ROUTER_SPEC = dataclasses.replace(
    ENGINE_SPEC, name=ROUTER, discovery=True, analysis="slime_hangdoctor.analysis.parts.routers"
)


# Every HTTP answer of the engines and the routers, in the bundle's order.
HTTP_ANSWERS = Join("http", _answers)
