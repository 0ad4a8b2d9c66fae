"""Per-engine state from its HTTP answers, its processes and Ray: dead, unresponsive, stuck, busy, idle.

sglang.md: connection refused = the server is gone; `/health` 503 or a timeout, or `/server_info` with
`internal_states == []` (slime's patch: the scheduler did not answer in 2 s) = the scheduler is not
processing; requests in flight with frozen token counters between two samples = stuck. `/metrics`,
`/v1/loads` and `/model_info` answer from the HTTP process even when the scheduler is stuck.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from slime_hangdoctor.analysis.world import Proc, World
from slime_hangdoctor.facts import (
    EngineLoad,
    HttpAnswer,
    ModelInfo,
    Outcome,
    ServerInfo,
    SglangMetrics,
)
from slime_hangdoctor.parsers.sglang import WORK_COUNTERS
from slime_hangdoctor.snapshot import HttpObs
from slime_hangdoctor.verdict import Role

_HEALTH = ("/health", "/health_generate", "/ready")
_SCHED_PATHS = ("/server_info", "/get_server_info", "/flush_cache", "/get_load")


class EngineState(str, Enum):
    DEAD = "dead"
    UNRESPONSIVE = "unresponsive"
    STUCK = "stuck"
    BUSY = "busy"
    IDLE = "idle"
    UNKNOWN = "unknown"


HUNG_ENGINE_STATES = frozenset({EngineState.DEAD, EngineState.UNRESPONSIVE, EngineState.STUCK})


@dataclass(frozen=True)
class EngineRead:
    url: str
    state: EngineState
    evidence: tuple[str, ...]
    node_ip: str | None = None
    running: float | None = None
    queued: float | None = None
    moving: tuple[str, ...] = ()  # counters that rose between the samples
    frozen: bool = False  # counters compared across two samples and unchanged
    weight_versions: tuple[str, ...] = ()  # per sample, where seen
    procs: tuple[Proc, ...] = ()

    @property
    def in_flight(self) -> float | None:
        if self.running is None and self.queued is None:
            return None
        return (self.running or 0.0) + (self.queued or 0.0)

    @property
    def server(self) -> Proc | None:
        return next((p for p in self.procs if p.kind == "http_server"), None)

    @property
    def actor(self) -> Proc | None:
        return next((p for p in self.procs if p.kind == "actor"), None)

    @property
    def schedulers(self) -> tuple[Proc, ...]:
        return tuple(p for p in self.procs if p.kind == "scheduler")


def _describe(a: HttpAnswer) -> str:
    if a.status is None:
        return f"GET {a.url}{a.path}: no answer ({a.error or 'no error text'})"
    return f"GET {a.url}{a.path}: HTTP {a.status} in {a.elapsed_s:.1f} s"


def _refused(a: HttpAnswer) -> bool:
    """No HTTP answer, and not for lack of time: nothing listens (refused, unreachable, unknown
    host) or the connection failed (reset)."""
    return a.status is None and a.outcome in (Outcome.UNAVAILABLE, Outcome.FAILED)


def _timed_out(a: HttpAnswer) -> bool:
    """No (whole) answer within the probe's time: no headers, or a body that stalled."""
    return a.outcome is Outcome.TIMED_OUT


def _metrics(obs: list[HttpObs]) -> dict[int, SglangMetrics]:
    out: dict[int, SglangMetrics] = {}
    for o in obs:
        if isinstance(o.parsed, SglangMetrics):
            out[o.sample] = o.parsed
    return out


def _moving(metrics: dict[int, SglangMetrics]) -> tuple[tuple[str, ...], bool]:
    """Counters that rose between the first and the last sample; whether a comparison was made."""
    if len(metrics) < 2:
        return (), False
    first, last = metrics[min(metrics)], metrics[max(metrics)]
    moving: list[str] = []
    compared = False
    for attr, label in WORK_COUNTERS:
        a, b = getattr(first, attr), getattr(last, attr)
        if a is None or b is None:
            continue
        compared = True
        if b > a:
            moving.append(f"{label} +{b - a:g}")
    return tuple(moving), compared


def _load(
    latest: list[HttpObs], metrics: SglangMetrics | None
) -> tuple[float | None, float | None]:
    for o in latest:
        if isinstance(o.parsed, EngineLoad):
            return float(o.parsed.running), float(o.parsed.waiting)
    if metrics is not None and (metrics.running_reqs is not None or metrics.queue_reqs is not None):
        return metrics.running_reqs, metrics.queue_reqs
    return None, None


def _weight_versions(obs: list[HttpObs]) -> tuple[str, ...]:
    seen: dict[int, str] = {}
    for o in obs:
        if isinstance(o.parsed, (ModelInfo, ServerInfo)) and o.parsed.weight_version is not None:
            seen[o.sample] = o.parsed.weight_version
    return tuple(seen[s] for s in sorted(seen))


def _unresponsive(latest: list[HttpObs]) -> list[str]:
    why: list[str] = []
    for o in latest:
        a = o.answer
        if a.path in _HEALTH and (a.status == 503 or _timed_out(a)):
            why.append(_describe(a) + " (the scheduler did not produce a result in time)")
        if isinstance(o.parsed, ServerInfo) and o.parsed.scheduler_unresponsive:
            why.append(
                f"GET {a.url}{a.path}: internal_states == [] "
                "(the scheduler did not answer within SGLANG_SERVER_INFO_TIMEOUT)"
            )
        if a.path in _SCHED_PATHS and _timed_out(a):
            why.append(_describe(a) + " (a scheduler round trip timed out)")
    return why


def read_engine(url: str, obs: list[HttpObs], world: World, node_ip: str | None) -> EngineRead:
    procs = tuple(
        p
        for p in world.procs
        if (p.engine_url or "").rstrip("/") == url and p.role is Role.SGLANG_ENGINE
    )
    latest_sample = max((o.sample for o in obs), default=None)
    latest = [o for o in obs if o.sample == latest_sample]
    metrics = _metrics(obs)
    last_metrics = metrics[max(metrics)] if metrics else None
    moving, compared = _moving(metrics)
    running, queued = _load(latest, last_metrics)
    versions = _weight_versions(obs)
    evidence: list[str] = []
    dead_procs = [p for p in procs if p.kind in ("http_server", "scheduler") and p.dead]
    answers = [o.answer for o in latest]

    def make(state: EngineState, frozen: bool = False) -> EngineRead:
        return EngineRead(
            url, state, tuple(evidence), node_ip, running, queued, moving, frozen, versions, procs
        )

    if answers and all(_refused(a) for a in answers):
        evidence.extend(_describe(a) for a in answers[:3])
        return make(EngineState.DEAD)
    if dead_procs:
        evidence.extend(f"{p.label} (pid {p.pid}) is gone" for p in dead_procs)
        return make(EngineState.DEAD)
    if moving:
        evidence.append("counters moving: " + ", ".join(moving))
        return make(EngineState.BUSY)
    if len(set(versions)) > 1:
        evidence.append("weight_version moved: " + " -> ".join(versions))
        return make(EngineState.BUSY)
    unresponsive = _unresponsive(latest)
    in_flight = (running or 0.0) + (queued or 0.0)
    if compared and in_flight > 0:
        evidence.append(
            f"{in_flight:g} requests in flight (running {running or 0:g}, queued {queued or 0:g}) "
            "and no token counter moved between the samples"
        )
        evidence.extend(unresponsive)
        return make(EngineState.STUCK, frozen=True)
    if unresponsive:
        evidence.extend(unresponsive)
        return make(EngineState.UNRESPONSIVE, frozen=compared)
    if answers and all(a.status is None for a in answers):
        evidence.extend(_describe(a) for a in answers[:3])
        return make(EngineState.UNRESPONSIVE)
    if running is not None or queued is not None:
        if in_flight == 0:
            evidence.append("no request running or queued")
            return make(EngineState.IDLE, frozen=compared)
        evidence.append(f"running {running or 0:g}, queued {queued or 0:g}")
    return make(EngineState.UNKNOWN, frozen=compared)


def read_engines(world: World) -> tuple[EngineRead, ...]:
    """One EngineRead per engine URL the topology or the HTTP probes know."""
    by_url: dict[str, list[HttpObs]] = {}
    for o in world.snapshot.http:
        if o.kind == "engine":
            by_url.setdefault(o.answer.url.rstrip("/"), []).append(o)
    nodes: dict[str, str | None] = {}
    for e in world.topology.engines:
        nodes[e.url.rstrip("/")] = e.node_ip
        by_url.setdefault(e.url.rstrip("/"), [])
    for p in world.procs:
        if p.role is Role.SGLANG_ENGINE and p.engine_url:
            by_url.setdefault(p.engine_url.rstrip("/"), [])
            nodes.setdefault(p.engine_url.rstrip("/"), p.node_ip)
    return tuple(
        read_engine(url, obs, world, nodes.get(url)) for url, obs in sorted(by_url.items())
    )
