"""Per-engine state from its HTTP answers, its processes, Ray and the router.

States: dead, unresponsive, stuck, paused, busy, idle, unknown. What each answer means was read in
the SGLang source slime runs (0.5.15.post1 + slime's docker/patch/latest/sglang.patch) and in 0.5.23
(docs/probes.md lists, per signal, the versions that have it):

- Connection refused everywhere, or the server/scheduler process gone: DEAD.
- A step counter rose between the samples (`sglang:realtime_tokens_total`, incremented on every
  decode step, or the forward seconds): BUSY. So did a finished-request counter or `/model_info`'s
  `weight_version`.
- Pause evidence (a paused engine looks idle, or stuck when paused `in_place`/`retract`, because the
  scheduler loop stops publishing its load, scheduler.py:1551): PAUSED, never stuck or idle. Read
  from `/ready` 503 with `/ping` 200 (>=0.5.20), more `/pause_generation` than
  `/continue_generation` calls in the HTTP middleware's counters (0.5.15's only pause indicator),
  or Ray's task history (a last `pause_generation` with no `continue_generation` after it and no
  weight update still running: `actor_queues.PausedEngine.left_paused`).
- `/generate` requests in flight at the HTTP layer (or at the router) that the scheduler's
  `/v1/loads` does not hold, with none of the pause evidence above: HELD, never stuck or idle, and
  not called paused. They may wait at the tokenizer's pause gate (tokenizer_manager.py:619-620), but
  as well at the weight-update lock, in a tokenizer worker that never forwards them, or be a request
  never reaped; only the pause evidence tells a pause.
- Requests in flight (`/v1/loads`, or `/generate` calls at the HTTP layer) and the step counters
  compared flat: STUCK. Metric gauges never count, not even when `/v1/loads` is unknown:
  `num_running_reqs` refreshes only on prefill, every `decode_log_interval` decode steps or every
  30 s idle (they are shown as a note). The realtime counters exist only after their first
  non-zero increment (metrics_collector.py:1203-1217), so an engine that never ran a batch has
  nothing to compare.
- `/generate` requests at the HTTP layer beyond the published load, no pause call, and the
  scheduler blocked in one frame in both samples (py-spy): STUCK in its first batch after idle
  (the LoadSnapshot is published after a prefill batch, every 15 decode batches and when idle, so
  it still says idle). An abort-mode `/pause_generation` held in flight in every sample beside
  requests in `/v1/loads` and flat step counters: STUCK (its drain waits for them, holding
  `is_pause_cond`, tokenizer_manager.py:1697-1709).
- Every endpoint timed out while the HTTP process lives: UNRESPONSIVE, and the evidence says the
  HTTP process itself is blocked (one asyncio loop serves every endpoint), with its py-spy stack.
- A scheduler round trip that timed out (`/server_info`; not `/get_load`, which reads shared memory
  since 0.5.15), or `/health` 503: UNRESPONSIVE.
- `internal_states: []` from slime's patched `/server_info`: evidence of a silent scheduler only
  with frozen progress (above) or on a version that recovers (>= 0.5.23). Before 0.5.23 one call
  that timed out (any scheduler stall over 2 s, a probe during a weight sync included) leaves the
  queueing communicator's `_result_event` set (communicator.py:38-58), and every later call
  answers `[]` after 2 s: alone it is unknown, and a note says the endpoint may be poisoned.
- `{"loads": []}` (shared memory not attached): unknown, never idle.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

from slime_hangdoctor.analysis.actor_queues import PausedEngine, build_view
from slime_hangdoctor.analysis.signatures import Block, split_name
from slime_hangdoctor.analysis.signatures.sglang import (
    DETOKENIZER_FILE,
    DETOKENIZER_LOOPS,
    DETOKENIZER_RECV,
)
from slime_hangdoctor.analysis.source import Source
from slime_hangdoctor.analysis.world import Proc, World
from slime_hangdoctor.outcome import Outcome
from slime_hangdoctor.parsers.sglang import (
    HTTP_ANSWERS,
    RECOVERING_VERSION,
    STEP_COUNTERS,
    EngineLoad,
    HttpAnswer,
    HttpObs,
    HttpPeer,
    ModelInfo,
    RouterWorker,
    RouterWorkers,
    ServerInfo,
    SglangMetrics,
    counter_rises,
    version_tuple,
)
from slime_hangdoctor.topology import MemberKind
from slime_hangdoctor.verdict import NextStep, Role, Stage

SGLANG = Source("sglang")  # the engines' and routers' HTTP answers

_HEALTH = ("/health", "/health_generate")
# Round trips to the scheduler: a timeout means the scheduler did not answer. Not `/get_load`, nor
# `/v1/loads`: since 0.5.15 both read the shared-memory snapshot (http_server.py:730-756).
_SCHED_PATHS = ("/server_info", "/get_server_info", "/flush_cache")
_GENERATE = "/generate"
_PAUSE, _CONTINUE = "/pause_generation", "/continue_generation"
PAUSE_CALL = _PAUSE  # the pause's control call, for the parts that read it
# Control calls whose HTTP request in flight (`sglang:http_requests_active`) places the engine in a
# stage: slime calls them from the SGLangEngine actor and waits without a timeout.
CALL_STAGES: Mapping[str, Stage] = {
    "/init_weights_update_group": Stage.WEIGHT_SYNC,
    "/update_weights_from_distributed": Stage.NCCL_BROADCAST,
    "/update_weights_from_tensor": Stage.WEIGHT_SYNC,
    _PAUSE: Stage.WEIGHT_SYNC,
    "/release_memory_occupation": Stage.OFFLOAD_ONLOAD,
    "/resume_memory_occupation": Stage.OFFLOAD_ONLOAD,
    # slime main (THUDM/slime 624b824a8) calls the five below with no timeout; each stage is read
    # from their callers there. /flush_cache (GET, up to 60 tries, sglang_engine.py:270-289):
    # after every weight update (update_weight_from_distributed.py:112,
    # update_weight_from_tensor.py:286, update_weight_from_disk_delta.py:180, the disk reload in
    # actor_group.py:245), and also first thing in release_memory_occupation
    # (sglang_engine.py:328-330, an offload): weight sync, the caller of four of five.
    "/flush_cache": Stage.WEIGHT_SYNC,
    # sglang_engine.py:358-370, called by RayTrainGroup._reload_rollout_weights_from_disk
    # (actor_group.py:248) and UpdateWeightFromDiskDelta (update_weight_from_disk_delta.py:183)
    "/update_weights_from_disk": Stage.WEIGHT_SYNC,
    # sglang_engine.py:344-356 (slime's SGLang patch), called by actor_group.py:240 and
    # update_weight_from_disk_delta.py:110,178 before the engines reload from disk
    "/pull_weights": Stage.WEIGHT_SYNC,
    # sglang_engine.py:437-454, called by post_process_weights (update_weight_from_distributed.py:
    # 359-369) around each update (update_weight_from_distributed.py:116,129,
    # update_weight_from_tensor.py:288,326)
    "/post_process_weights": Stage.WEIGHT_SYNC,
    # sglang_engine.py:430-435, the last call of every weight update
    # (update_weight_from_distributed.py:134, update_weight_from_tensor.py:331,
    # update_weight_from_disk_delta.py:190, actor_group.py:269)
    _CONTINUE: Stage.WEIGHT_SYNC,
    # SGLang 0.5.23's weight-update session (entrypoints/http_server.py:1458, :1473): both take
    # the model-update writer lock unless the engine is paused (managers/tokenizer_control_mixin.py:
    # 471-482), then the scheduler's begin / end, each ending in a TP-group barrier
    # (managers/scheduler_components/weight_updater.py:309-335). miles main (radixark/miles
    # 31f1ca961) opens and closes one around every weight update (sglang_engine.py:636-642, called
    # from update_weight/common.py:411,427 and the FSDP path's update_weight_utils.py:77,107).
    "/begin_weight_update": Stage.WEIGHT_SYNC,
    "/end_weight_update": Stage.WEIGHT_SYNC,
    # 0.5.23 http_server.py:1527; miles sets it before closing the session (sglang_engine.py:644,
    # update_weight_from_distributed/mixin.py:326)
    "/update_weight_version": Stage.WEIGHT_SYNC,
    # LoRA adapters pushed in miles's weight update: 0.5.23 http_server.py:1663, :1676 (miles
    # sglang_engine.py:408, :512, called from update_weight_from_tensor.py:510,524 and
    # update_weight_from_distributed/mixin.py:263)
    "/load_lora_adapter_from_tensors": Stage.WEIGHT_SYNC,
    "/unload_lora_adapter": Stage.WEIGHT_SYNC,
    # not a stock 0.5.23 endpoint: miles's SGLang branch (`sglang-miles`, docker/Dockerfile:19)
    # serves it; the engine receives the adapter's broadcast while it is in flight (miles
    # sglang_engine.py:440, update_weight_from_distributed/broadcast.py:143-161)
    "/load_lora_adapter_from_distributed": Stage.NCCL_BROADCAST,
}
# The HTTP method slime sends each control call with: POST (`SGLangEngine._make_request`,
# `pause_generation`, `continue_generation`: sglang_engine.py:215,426,433 in 624b824a8), except
# /flush_cache, a GET (sglang_engine.py:277; also in the January layout 9bfe152, :282). SGLang
# 0.5.15.post1 serves /flush_cache for GET and POST alike (http_server.py:862).
_GET_CALLS = frozenset({"/flush_cache"})


def call_request(path: str, url: str = "") -> str:
    """A control call as slime sends it: `POST /update_weights_from_disk`, `GET /flush_cache`
    (`url`: the engine's, before the path)."""
    return f"{'GET' if path in _GET_CALLS else 'POST'} {url}{path}"


# The last release whose `/server_info` `weight_version` follows weight updates (0.5.23's is the
# startup value, http_server.py:863-873 there).
LIVE_SERVER_INFO_VERSION = (0, 5, 15)


class EngineState(str, Enum):
    DEAD = "dead"
    UNRESPONSIVE = "unresponsive"
    STUCK = "stuck"
    PAUSED = "paused"
    HELD = "held"  # requests held between the HTTP layer and the scheduler, no pause evidence
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
    running: float | None = None  # from /v1/loads (or /get_load); None when unknown
    queued: float | None = None
    moving: tuple[str, ...] = ()  # counters that rose between the samples
    frozen: bool = False  # step counters compared across two samples and unchanged
    weight_versions: tuple[str, ...] = ()  # per sample, where seen
    procs: tuple[Proc, ...] = ()
    calls: tuple[str, ...] = ()  # control calls in flight in the latest sample (CALL_STAGES keys)
    calls_held: tuple[str, ...] = ()  # ... and in flight in every sample that had /metrics
    notes: tuple[str, ...] = ()  # what a reader should know though it changes no state
    # On a version whose /server_info a timed-out call poisons: whether the doctor called it, per
    # sample, and why (it is skipped when the first reads show the scheduler busy or silent).
    server_info_calls: str | None = None
    server_info_skipped: bool = False  # ... and in at least one sample it did not call it
    # every endpoint timed out while the HTTP process lives: its event loop is blocked
    http_blocked: bool = False
    # its detokenizer is held inside one output batch (`stalled_detokenizer`)
    detokenizer_stalled: bool = False

    @property
    def in_flight(self) -> float | None:
        if self.running is None and self.queued is None:
            return None
        return (self.running or 0.0) + (self.queued or 0.0)

    @property
    def call_stage(self) -> Stage | None:
        """The stage of the control call held in flight across the samples, where one is."""
        for path in self.calls_held or self.calls:
            return CALL_STAGES[path]
        return None

    @property
    def server(self) -> Proc | None:
        return next((p for p in self.procs if p.kind is MemberKind.HTTP_SERVER), None)

    @property
    def actor(self) -> Proc | None:
        return next((p for p in self.procs if p.kind is MemberKind.ACTOR), None)

    @property
    def schedulers(self) -> tuple[Proc, ...]:
        return tuple(p for p in self.procs if p.kind is MemberKind.SCHEDULER)

    @property
    def detokenizer(self) -> Proc | None:
        return next((p for p in self.procs if p.kind is MemberKind.DETOKENIZER), None)

    def as_suspect(self, proc: Proc | None) -> dict[str, object]:
        """What a suspect named by these HTTP answers says of the engine, its process `proc`
        standing in: its URL, its node (else `proc`'s) and the answers as evidence (the fields
        parts engines and rollout hand to `suspect`)."""
        node_ip = self.node_ip or (proc.node_ip if proc else None)
        return {"engine_url": self.url, "node_ip": node_ip, "evidence": self.evidence}


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
    """Counters that rose between the first and the last sample; whether a step counter was
    compared (only those say "no step ran" when flat)."""
    if len(metrics) < 2:
        return (), False
    first, last = metrics[min(metrics)], metrics[max(metrics)]
    compared = any(
        getattr(first, attr) is not None and getattr(last, attr) is not None
        for attr in STEP_COUNTERS
    )
    return counter_rises(first, last), compared


def _load(latest: list[HttpObs]) -> tuple[EngineLoad | None, list[str]]:
    """The latest sample's load answer, and a note when it carried no DP rank."""
    for o in latest:
        if isinstance(o.parsed, EngineLoad):
            if o.parsed.known:
                return o.parsed, []
            return None, [
                f"GET {o.answer.url}{o.answer.path}: no DP rank reported (the HTTP process has "
                "not attached the scheduler's shared-memory load snapshot): load unknown"
            ]
    return None, []


def _in_flight(load: EngineLoad | None) -> tuple[float | None, float | None]:
    """Running and queued requests, from `/v1/loads` only (published every 15 decode steps, at each
    prefill and when idle). Never from the `num_running_reqs`/`num_queue_reqs` gauges: they refresh
    only at prefill, every `decode_log_interval` (40) decode steps and every 30 s idle, so they can
    say "running" for up to 30 s after the last request ended, and a flat step counter beside them
    would read as stuck. Without a load the count is unknown (see `_gauge_line`)."""
    if load is not None and load.running is not None and load.waiting is not None:
        return float(load.running), float(load.waiting)
    return None, None


def _gauge_line(metrics: SglangMetrics | None) -> list[str]:
    """What the gauges say where `/v1/loads` said nothing: shown, never counted."""
    if metrics is None or (metrics.running_reqs is None and metrics.queue_reqs is None):
        return []
    return [
        f"the metric gauges say running {metrics.running_reqs or 0:g}, queued "
        f"{metrics.queue_reqs or 0:g}, as last refreshed (at prefill, every 40 decode steps or "
        "30 s idle): not counted"
    ]


def _weight_versions(obs: list[HttpObs]) -> tuple[str, ...]:
    """Per sample: `/model_info`'s weight_version; `/server_info`'s only where no `/model_info`
    answered and the server's version keeps that field current (<= 0.5.15)."""
    model: dict[int, str] = {}
    server: dict[int, str] = {}
    for o in obs:
        parsed = o.parsed
        if isinstance(parsed, ModelInfo) and parsed.weight_version is not None:
            model[o.sample] = parsed.weight_version
        elif isinstance(parsed, ServerInfo) and parsed.weight_version is not None:
            version = version_tuple(parsed.version)
            if version is not None and version <= LIVE_SERVER_INFO_VERSION:
                server[o.sample] = parsed.weight_version
    seen = {**server, **model}
    return tuple(seen[s] for s in sorted(seen))


def _server_infos(latest: list[HttpObs]) -> list[tuple[HttpAnswer, ServerInfo]]:
    return [(o.answer, o.parsed) for o in latest if isinstance(o.parsed, ServerInfo)]


def _held_back_infos(obs: list[HttpObs], latest_sample: int | None) -> list[HttpObs]:
    """Where the latest sample held `/server_info` back (not sent: an earlier sample found the
    scheduler busy or silent, collect/sglang.py `server_info_held`), the answers of the latest
    sample that sent it: the engine's latest word on its scheduler. Else none."""
    infos = [o for o in obs if o.answer.path in ("/server_info", "/get_server_info")]
    if not any(o.sample == latest_sample and not o.answer.sent for o in infos):
        return []
    sent = [o.sample for o in infos if o.answer.sent]
    return [o for o in infos if sent and o.sample == max(sent) and o.answer.sent]


def _recovers(info: ServerInfo) -> bool:
    version = version_tuple(info.version)
    return version is not None and version >= RECOVERING_VERSION


def _empty_states_line(a: HttpAnswer, info: ServerInfo) -> str:
    return (
        f"GET {a.url}{a.path}: internal_states == [] after {a.elapsed_s:.1f} s "
        f"(SGLang {info.version or 'version unknown'}: no scheduler reply within "
        "SGLANG_SERVER_INFO_TIMEOUT)"
    )


def poisoned_note(url: str, info: ServerInfo) -> str:
    return (
        f"engine {url}: /server_info answers internal_states == [] but nothing else says its "
        f"scheduler is stuck. On SGLang {info.version or '(version unknown)'} with slime's patch, "
        "one /server_info that timed out (any scheduler stall over 2 s: a weight sync, a long "
        "prefill, a probe during one) leaves the endpoint poisoned: every later call answers [] "
        "after 2 s; only an engine restart clears it. Read /v1/loads and /metrics instead."
    )


def server_info_calls(url: str, obs: list[HttpObs]) -> str | None:
    """What the doctor did with `/server_info` in each sample, on an engine whose version (as
    `/v1/loads` or `/server_info` reported it; unknown counts) lets one timed-out call poison it."""
    versions = [
        o.parsed.version
        for o in obs
        if isinstance(o.parsed, (EngineLoad, ServerInfo)) and o.parsed.version
    ]
    version = versions[-1] if versions else None
    parsed = version_tuple(version)
    if parsed is not None and parsed >= RECOVERING_VERSION:
        return None
    parts: list[str] = []
    for o in sorted(obs, key=lambda o: o.sample):
        a = o.answer
        if a.path not in ("/server_info", "/get_server_info") or a.status == 404:
            continue
        if a.sent and _refused(a):
            continue  # nothing listened: nothing to poison
        label = f"sample {o.sample + 1}"
        if not a.sent:
            parts.append(f"{label}: not called ({(a.error or '').removeprefix('not sent: ')})")
        elif isinstance(o.parsed, ServerInfo) and not o.parsed.empty_internal_states:
            parts.append(
                f"{label}: called, as the first reads showed the scheduler idle; it answered "
                f"with its states in {a.elapsed_s:.1f} s"
            )
        else:
            parts.append(
                f"{label}: called, as the first reads showed the scheduler idle; it gave no "
                f"states ({_describe(a)}): if this call timed out it may itself have poisoned "
                "the endpoint"
            )
    if not parts:
        return None
    named = f"SGLang {version}" if version else "SGLang of unknown version"
    return (
        f"engine {url} ({named}: one /server_info that times out leaves the endpoint answering "
        "internal_states: [] until a restart): " + "; ".join(parts)
    )


def _unresponsive(latest: list[HttpObs], *, empty_counts: bool) -> list[str]:
    """Why the scheduler looks silent in the latest sample. `empty_counts`: whether slime's
    `internal_states: []` counts (it does on a recovering version, or beside frozen progress)."""
    why: list[str] = []
    for o in latest:
        a = o.answer
        if a.path in _HEALTH and (a.status == 503 or _timed_out(a)):
            why.append(_describe(a) + " (the scheduler did not produce a result in time)")
        if (
            isinstance(o.parsed, ServerInfo)
            and o.parsed.empty_internal_states
            and (empty_counts or _recovers(o.parsed))
        ):
            why.append(_empty_states_line(a, o.parsed))
        if a.path in _SCHED_PATHS and _timed_out(a):
            why.append(_describe(a) + " (a scheduler round trip timed out)")
    return why


# Where a scheduler that waits in the same frame in both samples is not merely between batches.
_BLOCKED = frozenset(
    {
        Block.COLLECTIVE,
        Block.RENDEZVOUS,
        Block.CUDA_SYNC,
        Block.WAIT,
        Block.HTTP,
        Block.SLEEP,
        Block.PARKED,
        Block.SUBPROCESS,
    }
)


def _schedulers_frozen(procs: tuple[Proc, ...]) -> list[str]:
    """Schedulers blocked at the same stack in two samples: the scheduler's own frozen progress."""
    out: list[str] = []
    for p in procs:
        if p.kind is not MemberKind.SCHEDULER or (pair := p.two_reads) is None:
            continue
        first, last = pair
        if last.block in _BLOCKED and first.primary.key() == last.primary.key():
            out.append(f"{p.label} (pid {p.pid}) {last.describe()} in both samples")
    return out


def stalled_detokenizer(procs: tuple[Proc, ...]) -> tuple[Proc, str] | None:
    """The engine's `sglang::detokenizer` held inside the handling of one batch, in the same
    functions in both samples (not back at its receive): the outputs of the engine's finished
    requests stop there, and so does the heartbeat `/health` waits for (tokenizer_manager.py
    :1848-1860 stamps `last_receive_tstamp` on what the detokenizer sends; sglang#36333,
    #40809). With its words: where it is."""
    for p in procs:
        if p.kind is not MemberKind.DETOKENIZER or (pair := p.two_reads) is None:
            continue
        first, last = pair
        t = last.primary
        if t.calls() != first.primary.calls():
            continue
        loop = next(
            (
                i
                for i, f in enumerate(t.frames)
                if split_name(f.name)[1] in DETOKENIZER_LOOPS
                and (f.short_filename or f.filename).endswith(DETOKENIZER_FILE)
            ),
            None,
        )
        if not loop:  # None, or the loop frame innermost: nothing inside it to tell
            continue
        inner = t.frames[loop - 1]
        if split_name(inner.name)[1] in DETOKENIZER_RECV:
            continue
        return p, f"{last.describe()} in both samples (its loop in {split_name(inner.name)[1]})"
    return None


# Where an engine URL was learned (topology.Engine.source), in words; a listening socket needs none.
_URL_SOURCES: Mapping[str, str] = {
    "user-flag": "--sglang-url",
    "router": "the router's worker list (GET /workers)",
    "earlier-answer": "its own answers earlier in this run",
    "actor-log": "its engine actor's log",
}


def url_origin(world: World, url: str) -> str | None:
    """Where the doctor learned `url`, when it was not from a process listening on it."""
    for e in world.topology.engines:
        if e.url.rstrip("/") == url and e.source in _URL_SOURCES:
            return e.origin or _URL_SOURCES[e.source]
    return None


def _status_of(latest: list[HttpObs], path: str) -> int | None:
    return next((o.answer.status for o in latest if o.answer.path == path), None)


def router_entry(world: World, url: str) -> RouterWorker | None:
    """This engine's entry in the router's latest `/workers` answer."""
    routers = [o for o in world.snapshot.joined(HTTP_ANSWERS) if o.kind is HttpPeer.ROUTER]
    last = max((o.sample for o in routers), default=0)
    for o in routers:
        if o.sample == last and isinstance(o.parsed, RouterWorkers):
            for w in o.parsed.workers:
                if w.url.rstrip("/") == url:
                    return w
    return None


# Requests held between an engine's HTTP layer and its scheduler: the states that hold them.
HOLDING_STATES = frozenset({EngineState.PAUSED, EngineState.HELD})
HELD_CAUSES = (
    "a tokenizer worker that never forwards them, the weight-update lock, or a request never reaped"
)


@dataclass(frozen=True)
class _Pause:
    explicit: tuple[str, ...]  # the engine (or Ray's task history) says it is paused
    gated: tuple[str, ...]  # requests held before the scheduler
    held: float = 0.0  # how many (the larger gap of the HTTP layer's and the router's counts)

    @property
    def any(self) -> bool:
        return bool(self.explicit or self.gated)


def _pause(
    latest: list[HttpObs],
    metrics: SglangMetrics | None,
    load: EngineLoad | None,
    router: RouterWorker | None,
    history: PausedEngine | None = None,
) -> _Pause:
    explicit: list[str] = []
    gated: list[str] = []
    gap = 0.0
    if history is not None and history.left_paused:
        explicit.append(
            f"Ray task history: its last pause_generation ({history.pause.task_id[:12]}) finished "
            "and no continue_generation ran after it"
        )
    ready, ping = _status_of(latest, "/ready"), _status_of(latest, "/ping")
    if ready == 503 and ping == 200:
        explicit.append("GET /ready: 503 while GET /ping: 200 (SGLang >= 0.5.20: paused)")
    if metrics is not None and (metrics.http_requests or metrics.http_active):
        pauses = metrics.http_responses_ok.get(_PAUSE, 0.0) + metrics.http_active.get(_PAUSE, 0.0)
        continues = metrics.http_responses_ok.get(_CONTINUE, 0.0)
        if pauses > continues:
            explicit.append(
                f"{pauses:g} /pause_generation calls answered or in flight, {continues:g} "
                "/continue_generation answered (sglang:http_requests_total, "
                "sglang:http_responses_total): the engine is paused"
            )
    held = None if load is None else (load.running or 0) + (load.waiting or 0)
    active = metrics.http_active.get(_GENERATE) if metrics is not None else None
    if active is not None and held is not None and active > held:
        gap = active - held
        gated.append(
            f"{active:g} /generate requests in flight at the HTTP layer "
            f"(sglang:http_requests_active) but {held:g} in the scheduler (/v1/loads): the rest "
            "wait before the scheduler"
        )
    if router is not None and router.load and held is not None and router.load > held:
        gap = max(gap, router.load - held)
        gated.append(
            f"the router counts {router.load} requests in flight to this engine, the scheduler "
            f"holds {held:g} (/v1/loads): the rest wait before the scheduler"
        )
    return _Pause(tuple(explicit), tuple(gated), gap)


def _held_line(pause: _Pause, metrics: SglangMetrics | None) -> str:
    """What a gap between the HTTP layer and the scheduler is when no pause evidence shows."""
    counts = ""
    if metrics is not None and (metrics.http_requests or metrics.http_active):
        pauses = metrics.http_responses_ok.get(_PAUSE, 0.0) + metrics.http_active.get(_PAUSE, 0.0)
        continues = metrics.http_responses_ok.get(_CONTINUE, 0.0)
        counts = f" ({pauses:g} /pause_generation, {continues:g} /continue_generation answered)"
    return (
        f"{pause.held:g} requests held between the HTTP layer and the scheduler: not paused by "
        f"the evidence{counts}; {HELD_CAUSES}"
    )


def _calls(metrics: dict[int, SglangMetrics]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Control calls in flight in the latest sample, and those in flight in every sample."""
    per_sample = [
        {p for p in CALL_STAGES if m.http_active.get(p, 0.0) > 0}
        for _, m in sorted(metrics.items())
    ]
    if not per_sample:
        return (), ()
    latest = tuple(p for p in CALL_STAGES if p in per_sample[-1])
    held = set.intersection(*per_sample)
    return latest, tuple(p for p in latest if p in held)


@dataclass(frozen=True)
class _Reads:
    """What one engine's answers and processes show, read once for the state rules below."""

    url: str
    node_ip: str | None
    obs: list[HttpObs]
    procs: tuple[Proc, ...]
    latest: list[HttpObs]  # the answers of the latest sample that were sent
    last_metrics: SglangMetrics | None
    moving: tuple[str, ...]
    compared: bool
    load: EngineLoad | None
    load_notes: list[str]
    running: float | None
    queued: float | None
    versions: tuple[str, ...]
    calls: tuple[str, ...]
    calls_held: tuple[str, ...]
    router: RouterWorker | None
    # the latest sample's answers, and the last `/server_info` sent where it held that one back
    scheduler_reads: list[HttpObs]
    empty: list[tuple[HttpAnswer, ServerInfo]]  # `/server_info` answers with internal_states []

    @property
    def answers(self) -> list[HttpAnswer]:
        return [o.answer for o in self.latest]

    @property
    def in_flight(self) -> float:
        return (self.running or 0.0) + (self.queued or 0.0)

    def call_lines(self) -> list[str]:
        return [
            f"{call_request(p, self.url)} in flight (sglang:http_requests_active)"
            + (" in every sample" if p in self.calls_held else "")
            for p in self.calls
        ]


@dataclass(frozen=True)
class _State:
    """An engine's state and what shows it."""

    state: EngineState
    evidence: list[str]
    frozen: bool = False
    http_blocked: bool = False
    detokenizer_stalled: bool = False


def _engine_procs(world: World) -> dict[str, tuple[Proc, ...]]:
    """The engine processes by their engine's URL, in `procs` order (one pass: issue 46)."""
    found: dict[str, list[Proc]] = {}
    for p in world.procs:
        if p.role is Role.SGLANG_ENGINE:
            found.setdefault((p.engine_url or "").rstrip("/"), []).append(p)
    return {url: tuple(group) for url, group in found.items()}


def _gather(url: str, obs: list[HttpObs], world: World, node_ip: str | None) -> _Reads:
    procs = world.memo("engine_procs", lambda: _engine_procs(world)).get(url, ())
    latest_sample = max((o.sample for o in obs), default=None)
    latest = [o for o in obs if o.sample == latest_sample and o.answer.sent]
    metrics = _metrics(obs)
    last_metrics = metrics.get(latest_sample) if latest_sample is not None else None
    moving, compared = _moving(metrics)
    load, load_notes = _load(latest)
    running, queued = _in_flight(load)
    if load is None:
        load_notes = load_notes + _gauge_line(last_metrics)
    calls, calls_held = _calls(metrics)
    scheduler_reads = [*latest, *_held_back_infos(obs, latest_sample)]
    return _Reads(
        url=url,
        node_ip=node_ip,
        obs=obs,
        procs=procs,
        latest=latest,
        last_metrics=last_metrics,
        moving=moving,
        compared=compared,
        load=load,
        load_notes=load_notes,
        running=running,
        queued=queued,
        versions=_weight_versions(obs),
        calls=calls,
        calls_held=calls_held,
        router=router_entry(world, url),
        scheduler_reads=scheduler_reads,
        empty=[(a, i) for a, i in _server_infos(scheduler_reads) if i.empty_internal_states],
    )


def read_engine(
    url: str,
    obs: list[HttpObs],
    world: World,
    node_ip: str | None,
    history: tuple[PausedEngine, ...] = (),
) -> EngineRead:
    """One engine's state from its answers and processes, by the first rule that holds: gone,
    working, stuck or held at its HTTP layer, silent, else idle or unknown. `history`: the engines
    Ray's task history shows paused (`actor_queues.TaskView.paused`)."""
    r = _gather(url, obs, world, node_ip)
    found = _gone(r, world) or _working(r) or _held_or_stuck(r, history) or _silent(r)
    return _made(r, found or _rest(r))


def _made(r: _Reads, found: _State) -> EngineRead:
    notes: list[str] = []
    hung = found.state in (EngineState.STUCK, EngineState.UNRESPONSIVE)
    if r.empty and not hung and not any(_recovers(i) for _, i in r.empty):
        notes.append(poisoned_note(r.url, r.empty[0][1]))
    return EngineRead(
        r.url,
        found.state,
        tuple(found.evidence),
        r.node_ip,
        r.running,
        r.queued,
        r.moving,
        found.frozen,
        r.versions,
        r.procs,
        r.calls,
        r.calls_held,
        tuple(notes),
        server_info_calls(r.url, r.obs),
        any(o.answer.path == "/server_info" and not o.answer.sent for o in r.obs),
        found.http_blocked,
        found.detokenizer_stalled,
    )


def _gone(r: _Reads, world: World) -> _State | None:
    """Every answer refused, or its server or a scheduler gone: dead."""
    answers = r.answers
    if answers and all(_refused(a) for a in answers):
        evidence: list[str] = []
        origin = url_origin(world, r.url)
        if origin is not None:  # first: why a URL that nothing serves is an engine at all
            evidence.append(f"{r.url} is known from {origin}")
        evidence.extend(_describe(a) for a in answers[:3])
        if r.router is not None and r.router.is_healthy is False:
            evidence.append(f"the router marks {r.url} unhealthy")
        return _State(EngineState.DEAD, evidence)
    kinds = (MemberKind.HTTP_SERVER, MemberKind.SCHEDULER)
    dead = [p for p in r.procs if p.kind in kinds and p.dead]
    if dead:
        return _State(EngineState.DEAD, [f"{p.label} (pid {p.pid}) is gone" for p in dead])
    return None


def _working(r: _Reads) -> _State | None:
    if r.moving:
        return _State(EngineState.BUSY, ["counters moving: " + ", ".join(r.moving)])
    if len(set(r.versions)) > 1:
        return _State(EngineState.BUSY, ["weight_version moved: " + " -> ".join(r.versions)])
    return None


def _held_or_stuck(r: _Reads, history: tuple[PausedEngine, ...]) -> _State | None:
    """Requests in flight that do not move: stuck (a detokenizer held in one batch, a scheduler
    in its first batch after idle, a pause that cannot drain, a scheduler that makes no step),
    unresponsive, paused, or held at its HTTP layer."""
    actor_ids = {p.actor_id for p in r.procs if p.actor_id}
    paused_in_history = next((h for h in history if h.actor.actor_id in actor_ids), None)
    pause = _pause(r.latest, r.last_metrics, r.load, r.router, paused_in_history)
    frozen_scheds = _schedulers_frozen(r.procs)
    found = _stuck(r, pause, frozen_scheds)
    if found is not None:
        return found
    timed_out = _unresponsive(r.scheduler_reads, empty_counts=False)
    if r.empty and not timed_out and (r.calls_held or frozen_scheds):
        # `[]` with the scheduler's own frozen progress: a control call held in flight, or a
        # scheduler blocked at the same frame in both samples.
        timed_out = [_empty_states_line(a, i) for a, i in r.empty] + frozen_scheds
    if timed_out:
        evidence = [*timed_out, *pause.explicit, *pause.gated, *r.call_lines()]
        return _State(EngineState.UNRESPONSIVE, evidence, frozen=r.compared)
    if pause.explicit:
        evidence = [*pause.explicit, *pause.gated, *r.call_lines()]
        return _State(EngineState.PAUSED, evidence, frozen=r.compared)
    if pause.gated:
        evidence = [_held_line(pause, r.last_metrics), *pause.gated, *r.call_lines()]
        return _State(EngineState.HELD, evidence, frozen=r.compared)
    return None


def _stuck(r: _Reads, pause: _Pause, frozen_scheds: list[str]) -> _State | None:
    last = r.last_metrics
    http_generate = last.http_active.get(_GENERATE) if last is not None else None
    detok = stalled_detokenizer(r.procs)
    if detok is not None and pause.gated and not pause.explicit:
        # Requests the scheduler no longer holds and the HTTP layer still waits for, and the
        # detokenizer they pass through held in one batch: their outputs stop there.
        proc, where = detok
        evidence = [
            f"its {proc.label} (pid {proc.pid}) is held inside an output batch, not back at its "
            f"receive: {where}; the outputs of finished requests stop there, nothing "
            "reaches the HTTP process (SGLang's /health then answers 503: \"couldn't get a "
            'response from detokenizer")',
            f"{pause.held:g} /generate requests in flight at the HTTP layer or the router that "
            f"the scheduler no longer holds ({r.in_flight:g} in /v1/loads)",
            *r.call_lines(),
        ]
        return _State(EngineState.STUCK, evidence, r.compared, detokenizer_stalled=True)
    if pause.gated and not pause.explicit and frozen_scheds:
        # Requests held before the scheduler's last published load, no pause call, and the
        # scheduler blocked in one frame in both samples: not a pause gate but a scheduler stuck
        # in its first batch after idle, whose LoadSnapshot still says idle (it is published after
        # a prefill batch, every 15 decode batches and when idle: scheduler.py:3466, :3580).
        first = (
            f"{http_generate or 0:g} /generate requests in flight at the HTTP layer "
            f"(sglang:http_requests_active), {r.in_flight:g} in the scheduler's published load "
            "(/v1/loads): its snapshot from before this batch (published only after a prefill "
            "batch, every 15 decode batches and when idle), and the batch never ended:"
        )
        return _State(EngineState.STUCK, [first, *frozen_scheds, *r.call_lines()], True)
    if r.compared and r.in_flight > 0 and _PAUSE in r.calls_held:
        # An abort-mode pause drains while holding is_pause_cond (tokenizer_manager.py:1697-1709):
        # held in flight in every sample, with requests in the scheduler and no step between the
        # samples, it waits for a scheduler that does not run them to an end.
        first = (
            f"{r.in_flight:g} requests in flight (running {r.running or 0:g}, queued "
            f"{r.queued or 0:g}, /v1/loads) and no scheduler step between the samples "
            "(sglang:realtime_tokens_total flat), while /pause_generation waits in every sample "
            "for them to drain: the pause cannot finish (it holds is_pause_cond, so "
            "/continue_generation waits too)"
        )
        return _State(EngineState.STUCK, [first, *r.call_lines()], True)
    if r.compared and not pause.any and (r.in_flight > 0 or (http_generate or 0) > 0):
        if r.in_flight > 0:
            first = (
                f"{r.in_flight:g} requests in flight (running {r.running or 0:g}, queued "
                f"{r.queued or 0:g}, /v1/loads) and no scheduler step between the samples "
                "(sglang:realtime_tokens_total flat)"
            )
        else:
            first = (
                f"{http_generate:g} /generate requests in flight at the HTTP layer and no "
                "scheduler step between the samples (sglang:realtime_tokens_total flat)"
            )
        evidence = [first, *_unresponsive(r.scheduler_reads, empty_counts=True), *r.call_lines()]
        return _State(EngineState.STUCK, evidence, True)
    return None


def _silent(r: _Reads) -> _State | None:
    """No answer at all: the HTTP process blocked where it lives, else unresponsive."""
    answers = r.answers
    if not answers or not all(a.status is None for a in answers):
        return None
    evidence: list[str] = []
    server = next((p for p in r.procs if p.kind is MemberKind.HTTP_SERVER and not p.dead), None)
    blocked = server is not None and all(_timed_out(a) for a in answers)
    if server is not None and blocked:
        evidence.append(
            f"every endpoint of {r.url} timed out while its HTTP process {server.label} (pid "
            f"{server.pid}) lives: the HTTP process itself is blocked (one asyncio event loop "
            "serves /metrics, /model_info and /health too), not a dead engine"
        )
        if server.latest is not None:
            evidence.append(f"{server.label} (pid {server.pid}) {server.latest.describe()}")
    evidence.extend(_describe(a) for a in answers[:3])
    return _State(EngineState.UNRESPONSIVE, evidence, http_blocked=blocked)


def _rest(r: _Reads) -> _State:
    """Idle where it says it has no request; unknown otherwise."""
    evidence = r.call_lines()
    if r.empty:
        a, info = r.empty[0]
        evidence.append(
            _empty_states_line(a, info) + ": alone this does not show a stuck scheduler (the "
            "endpoint may be poisoned by an earlier timed-out call)"
        )
        return _State(EngineState.UNKNOWN, [*evidence, *r.load_notes], r.compared)
    evidence.extend(r.load_notes)
    if r.running is not None or r.queued is not None:
        if r.in_flight == 0 and not r.calls:
            evidence.append("no request running or queued")
            return _State(EngineState.IDLE, evidence, r.compared)
        evidence.append(f"running {r.running or 0:g}, queued {r.queued or 0:g}")
    return _State(EngineState.UNKNOWN, evidence, r.compared)


ENGINES_MEMO = "sglang_http.read_engines"  # the key of the engines' reads in `World.memo`


def read_engines(world: World) -> tuple[EngineRead, ...]:
    """One EngineRead per engine of the job the topology or the HTTP probes know (not those only
    a router lists: `Topology.listed`, whatever their answers say, nor a multi-node engine's node
    launchers: `Topology.launchers`), read once per world: every
    part, the composition and the advice reach the engines' reads here."""
    return world.memo(ENGINES_MEMO, lambda: _read_engines(world))


def _read_engines(world: World) -> tuple[EngineRead, ...]:
    strangers = {e.url.rstrip("/") for e in world.topology.listed}
    strangers |= {url.rstrip("/") for url in world.topology.launchers}  # no engine's API
    by_url: dict[str, list[HttpObs]] = {}
    for o in world.snapshot.joined(HTTP_ANSWERS):
        if o.kind is HttpPeer.ENGINE and o.answer.url.rstrip("/") not in strangers:
            by_url.setdefault(o.answer.url.rstrip("/"), []).append(o)
    nodes: dict[str, str | None] = {}
    for e in world.topology.engines:
        nodes[e.url.rstrip("/")] = e.node_ip
        by_url.setdefault(e.url.rstrip("/"), [])
    for p in world.procs:
        if p.role is Role.SGLANG_ENGINE and p.engine_url:
            by_url.setdefault(p.engine_url.rstrip("/"), [])
            nodes.setdefault(p.engine_url.rstrip("/"), p.node_ip)
    view = build_view(world.snapshot)
    history = view.paused if view is not None else ()
    return tuple(
        read_engine(url, obs, world, nodes.get(url), history)
        for url, obs in sorted(by_url.items())
        if url not in strangers
    )


def resume_step(url: str) -> NextStep:
    """The call that resumes an engine a `pause_generation` left paused (the request slime's
    SGLangEngine.continue_generation makes), with the warning that goes with it."""
    return NextStep(
        why="resumes the engine that a pause_generation without its continue_generation left "
        "paused, once the weight update that paused it has ended; do not probe a paused engine "
        "with calls that change its state (/flush_cache, /pause_generation, /update_weights_*, "
        "/release_memory_occupation): read /server_info, /metrics and its log instead",
        command=f"curl -s -m 10 -X POST {url}/continue_generation",
    )
