"""Observed facts of HTTP answers: SGLang engines' and the sgl-router's (shapes in
reference/sglang.md §2, §6). Frozen, I/O-free, no verdicts, as in `facts`; apart from them because a
watchdog run that reads only the engines' counters (watchdog/counter_look.py) needs these and not
the rest."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from slime_hangdoctor.outcome import Outcome


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
    # timed-out call poisoned the endpoint on 0.5.15: see analysis/engines.py); None: key absent
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
