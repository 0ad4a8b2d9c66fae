"""SGLang engines: dead, unresponsive or stuck with requests in flight (HTTP); an engine actor that
waits on its own server; an engine's scheduler absent from the weight broadcast the trainers, or its
peer engines' schedulers, wait in (engines compared with each other as train ranks are). Beside
them: an engine's work counters between the samples, what its answers add to a verdict (hung while
the job progresses elsewhere, paused, holding requests, a poisoned `/server_info`), and the known
cause that /health and /metrics answers are no progress."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from slime_hangdoctor.analysis.readers.proof import Moved, Proof, Signal
from slime_hangdoctor.analysis.readers.pyspy import STACKS, ThreadRead
from slime_hangdoctor.analysis.readers.sglang_http import (
    HUNG_ENGINE_STATES,
    PAUSE_CALL,
    SGLANG,
    EngineRead,
    EngineState,
    call_request,
    read_engines,
)
from slime_hangdoctor.analysis.signatures import Block, split_name
from slime_hangdoctor.analysis.signatures.slime import PAUSE_CALLERS
from slime_hangdoctor.analysis.source_analysis import (
    MEDIUM,
    STRONG,
    WEAK,
    Cause,
    Evidence,
    Reading,
    Reads,
    SourceAnalysis,
    Suspect,
    brief,
    cause,
    suspect,
)
from slime_hangdoctor.analysis.world import Proc, World
from slime_hangdoctor.parsers.sglang import HTTP_ANSWERS
from slime_hangdoctor.topology import MemberKind
from slime_hangdoctor.verdict import Finding, Role, Severity, Stage, Status

MESSAGES = {
    "engine-not-serving": "SGLang engines are dead, unresponsive or stuck",
}


def _engine_proc(e: EngineRead) -> Proc | None:
    if e.detokenizer_stalled and e.detokenizer is not None:
        return e.detokenizer  # the process where the engine's outputs stop
    dead = [p for p in e.schedulers if p.dead]
    if e.state is EngineState.DEAD and dead and len(dead) < len(e.schedulers):
        return dead[0]  # one rank of the engine died, its peers live on: the dead one
    return e.server or (e.schedulers[0] if e.schedulers else None) or e.actor


def _dead_rank(e: EngineRead, proc: Proc | None) -> bool:
    """`proc` is a scheduler of `e` that died while the engine's other ranks live."""
    return proc is not None and proc.dead and proc in e.schedulers


def engine_suspect(
    e: EngineRead, why: str, proc: Proc | None, *, weight: int, stage: Stage | None, **kw: object
) -> Suspect:
    """A suspect named by the engine's HTTP answers: the engine by its URL and node, its process
    `proc` standing in (the rollout part names a paused engine the same way)."""
    return suspect(
        SGLANG,
        Role.SGLANG_ENGINE,
        why,
        proc,
        weight=weight,
        stage=stage,
        **e.as_suspect(proc),
        **kw,
    )


def suspects(reads: Reads) -> list[Suspect]:
    world, engines = reads.world, read_engines(reads.world)
    out = _not_serving(world, engines)
    out.extend(_held_calls(engines))
    out.extend(_broadcast_absentees(world, engines))
    out.extend(_odd_engines(engines))
    out.extend(_blocked_engine_actors(world, engines))
    return out


def _not_serving(world: World, engines: tuple[EngineRead, ...]) -> list[Suspect]:
    """Engines dead, unresponsive or stuck by their HTTP answers (a weak suspect when the
    scheduler waits in the trainers' collective: a victim like them)."""
    out: list[Suspect] = []
    weights = {
        EngineState.DEAD: STRONG,
        EngineState.UNRESPONSIVE: MEDIUM,
        EngineState.STUCK: MEDIUM,
    }
    words = {
        EngineState.DEAD: "is dead (no server answers)",
        EngineState.UNRESPONSIVE: "is unresponsive: its scheduler does not answer",
        EngineState.STUCK: "is stuck: requests in flight and no token produced in the window",
    }
    for e in engines:
        if e.state not in weights:
            continue
        proc = _engine_proc(e)
        stage = _engine_stage(e)
        inside = _with_trainers(world, e, engines)
        why = f"engine {e.url} {words[e.state]}"
        if e.detokenizer_stalled:
            why = (
                f"engine {e.url} is stuck: its sglang::detokenizer is held inside one output batch, "
                "so the outputs of its finished requests never reach its HTTP process"
            )
        if e.http_blocked:
            why = (
                f"engine {e.url} is unresponsive: the HTTP process itself is blocked (every "
                "endpoint timed out while it lives)"
            )
        weight = weights[e.state]
        if inside and e.state is not EngineState.DEAD:
            why += (
                f" (its scheduler is {brief(inside[0])}: it waits in the same collective as the "
                "trainers and its peer engines)"
            )
            weight = WEAK
        out.append(
            engine_suspect(
                e,
                why,
                proc,
                weight=weight,
                stage=stage,
                waits_elsewhere=bool(inside),
                # the HTTP answers name the engine, not a process of it: its pid stands in, but
                # for a stalled detokenizer, a blocked HTTP process or a dead rank, whose own
                # state it is
                stands_in=not (e.detokenizer_stalled or e.http_blocked or _dead_rank(e, proc)),
            )
        )
    return out


def _held_calls(engines: tuple[EngineRead, ...]) -> list[Suspect]:
    """An engine whose weight-sync / offload call was in flight at the HTTP layer in every sample
    (`sglang:http_requests_active`): that call is inside the engine. Weak alone: a healthy sync
    also has one in flight for a while."""
    out: list[Suspect] = []
    for e in engines:
        if e.state in HUNG_ENGINE_STATES or not e.calls_held:
            continue
        proc = _engine_proc(e)
        out.append(
            engine_suspect(
                e,
                f"engine {e.url}: {call_request(e.calls_held[0])} has been in flight in every sample "
                "(sglang:http_requests_active): the call has not returned",
                proc,
                weight=WEAK,
                stage=e.call_stage,
                stands_in=True,  # the HTTP layer counts the call, not a process of the engine
            )
        )
    return out


def _engine_stage(e: EngineRead) -> Stage | None:
    """The stage the engine's stacks show, else the stage of the control call it has in flight."""
    for p in (*e.schedulers, e.actor):
        if p is not None and p.latest is not None and p.latest.stage is not None:
            return p.latest.stage
    return e.call_stage


def _trainers_in(world: World, stages: set[Stage]) -> list[Proc]:
    return [
        p
        for p in world.train_ranks()
        if p.latest is not None and p.latest.stage in stages and p.latest.primary.waiting
    ]


_SHARED_STAGES = (Stage.NCCL_BROADCAST, Stage.WEIGHT_SYNC)


def _in_engine_broadcast(p: Proc) -> bool:
    read = p.latest
    return read is not None and read.primary.in_collective and read.stage is Stage.NCCL_BROADCAST


@dataclass(frozen=True)
class BroadcastSplit:
    """The engines of one weight broadcast compared with each other, as train ranks are: those
    whose schedulers all wait in the broadcast, and those with a scheduler elsewhere that is not
    serving either (the odd ones out). Needs no trainer stack: with NCCL the trainer's CPU has
    left `handle.wait()` and waits in `ray.get` on the engines, or it lives on another node."""

    inside: tuple[EngineRead, ...] = ()
    outside: tuple[tuple[EngineRead, Proc], ...] = ()


def broadcast_split(engines: tuple[EngineRead, ...]) -> BroadcastSplit:
    inside: list[EngineRead] = []
    rest: list[EngineRead] = []
    for e in engines:
        scheds = [s for s in e.schedulers if s.latest is not None]
        if scheds and all(_in_engine_broadcast(s) for s in scheds):
            inside.append(e)
        elif scheds:
            rest.append(e)
    outside: list[tuple[EngineRead, Proc]] = []
    for e in rest if inside else []:
        s = next(s for s in e.schedulers if s.latest is not None and not _in_engine_broadcast(s))
        read = s.latest
        assert read is not None
        serving = e.state not in HUNG_ENGINE_STATES and read.block in (
            Block.EVENT_LOOP,
            Block.IDLE_WORKER,
        )
        if not serving:
            outside.append((e, s))
    if not outside:
        return BroadcastSplit()
    return BroadcastSplit(tuple(inside), tuple(outside))


def _odd_engines(engines: tuple[EngineRead, ...]) -> list[Suspect]:
    split = broadcast_split(engines)
    peers = ", ".join(
        f"{e.url} (scheduler pid {e.schedulers[0].pid}: {brief(e.schedulers[0])})"
        for e in split.inside[:4]
    )
    return [
        suspect(
            STACKS,
            Role.SGLANG_ENGINE,
            f"engine {e.url}: scheduler pid {s.pid} is not in the weight broadcast its peer "
            f"engines' schedulers wait in; it is {brief(s)} (peers: {peers})",
            s,
            engine_url=e.url,
            weight=MEDIUM,
            stage=Stage.NCCL_BROADCAST,
            evidence=tuple(
                f"engine {x.url} scheduler pid {p.pid}"
                + (f" @{p.node_ip}" if p.node_ip else "")
                + f": {brief(p)}"
                for x in (*split.inside, *(o for o, _ in split.outside))
                for p in x.schedulers[:2]
            )[:8],
        )
        for e, s in split.outside
    ]


def _with_trainers(world: World, e: EngineRead, engines: tuple[EngineRead, ...] = ()) -> list[Proc]:
    """Schedulers of `e` that wait in a collective shared with trainers that wait in the same
    weight-sync stage (the broadcast group), or in the weight broadcast while a peer engine's
    scheduler is elsewhere: such a scheduler is a victim like the trainers."""
    if any(x.url == e.url for x in broadcast_split(engines).inside):
        return list(e.schedulers)
    trainer_stages = {p.latest.stage for p in _trainers_in(world, set(_SHARED_STAGES)) if p.latest}
    return [
        s
        for s in e.schedulers
        if s.latest is not None
        and s.latest.primary.in_collective
        and s.latest.stage in _SHARED_STAGES
        and s.latest.stage in trainer_stages
    ]


_ENGINE_WAIT_STAGES = frozenset(
    {Stage.WEIGHT_SYNC, Stage.NCCL_BROADCAST, Stage.OFFLOAD_ONLOAD, Stage.STARTUP}
)


def _blocked_engine_actors(world: World, engines: tuple[EngineRead, ...]) -> list[Suspect]:
    """An SGLangEngine actor that waits on its own server (slime's `_make_request` has no timeout)
    in a control call, while the job waits on that call: the engine's server is not answering."""
    out: list[Suspect] = []
    for e in engines:
        actor = e.actor
        read = actor.latest if actor is not None else None
        if actor is None or read is None:
            continue
        if read.block not in (Block.HTTP, Block.PARKED, Block.SLEEP):
            continue
        if read.stage not in _ENGINE_WAIT_STAGES or _with_trainers(world, e, engines):
            continue
        out.append(
            suspect(
                STACKS,
                Role.SGLANG_ENGINE,
                f"engine {e.url}: its SGLangEngine actor is {read.describe()}: the server never "
                "answers that call (slime's engine requests carry no timeout)",
                actor,
                engine_url=e.url,
                weight=MEDIUM,
                stage=read.stage,
                evidence=tuple(f.where for f in read.primary.frames[:6]),
                # the actor is the witness: the engine behind its call holds (merge.holder)
                stands_in=True,
            )
        )
    return out


def _broadcast_absentees(world: World, engines: tuple[EngineRead, ...]) -> list[Suspect]:
    """Trainers wait in the weight broadcast / group creation; an engine's scheduler is elsewhere."""
    waiting = _trainers_in(world, {Stage.NCCL_BROADCAST}) or [
        p
        for p in _trainers_in(world, {Stage.WEIGHT_SYNC})
        if p.latest is not None and p.latest.block is Block.RENDEZVOUS
    ]
    if not waiting:
        return []
    stage = waiting[0].latest.stage if waiting[0].latest else None
    out: list[Suspect] = []
    for e in engines:
        scheds = [s for s in e.schedulers if s.latest is not None]
        if not scheds or e.state is EngineState.DEAD:
            continue
        absent = [
            s
            for s in scheds
            if s.latest is not None
            and (s.latest.stage != stage or not s.latest.primary.in_collective)
        ]
        if not absent:
            continue
        s = absent[0]
        out.append(
            suspect(
                STACKS,
                Role.SGLANG_ENGINE,
                f"engine {e.url}: scheduler pid {s.pid} is not in the weight "
                f"{'broadcast' if stage is Stage.NCCL_BROADCAST else 'group creation'} the "
                f"trainers wait in; it is {brief(s)}",
                s,
                engine_url=e.url,
                weight=MEDIUM,
                stage=stage,
                evidence=tuple(f"{p.label}: {brief(p)}" for p in waiting[:4]),
            )
        )
    return out


def evidence(reads: Reads, suspects: Sequence[Suspect]) -> list[Evidence]:
    engines = read_engines(reads.world)
    return [
        Evidence(
            SGLANG,
            "engine-not-serving",
            f"engine {e.url} {e.state.value}: " + "; ".join(e.evidence[:2]),
            2,
        )
        for e in engines
        if e.state in HUNG_ENGINE_STATES
    ]


def progress(world: World) -> Moved:
    """Each engine's work counters and weight version between the samples; counters that did not
    move while requests are in flight are frozen. A weight version that moved is the job's own
    work; the counters count only while the job's requests reach the engines (`Moved.served`)."""
    moved: list[Signal] = []
    served: list[Signal] = []
    frozen: list[Signal] = []
    compared = False
    for e in read_engines(world):
        subject = f"engine {e.url}"
        if e.moving:
            served.append(Signal(SGLANG, subject, ", ".join(e.moving[:3])))
            compared = True
        if len(set(e.weight_versions)) > 1:
            moved.append(
                Signal(SGLANG, subject, "weight_version " + " -> ".join(e.weight_versions))
            )
        if e.frozen:
            compared = True
            if (e.in_flight or 0) > 0:
                frozen.append(
                    Signal(
                        SGLANG, subject, f"{e.in_flight:g} requests in flight, counters unchanged"
                    )
                )
    return Moved(
        Proof.WORK, tuple(moved), frozen=tuple(frozen), compared=compared, served=tuple(served)
    )


def engine_findings(engines: tuple[EngineRead, ...], status: Status) -> list[Finding]:
    out: list[Finding] = []
    if status is Status.PROGRESSING:
        out.extend(
            Finding(
                "engine-" + e.state.value,
                Severity.WARNING,
                f"engine {e.url} is {e.state.value} while the job progresses elsewhere",
                e.evidence[:4],
            )
            for e in engines
            if e.state in HUNG_ENGINE_STATES
        )
    out.extend(
        Finding(
            "engine-paused",
            Severity.INFO,
            f"engine {e.url} is paused (generation held before its scheduler)",
            e.evidence[:4],
        )
        for e in engines
        if e.state is EngineState.PAUSED
    )
    out.extend(
        Finding(
            "engine-held",
            Severity.INFO,
            f"engine {e.url} holds requests between its HTTP layer and its scheduler (not "
            "paused by the evidence)",
            e.evidence[:4],
        )
        for e in engines
        if e.state is EngineState.HELD
    )
    out.extend(
        Finding("engine-server-info-poisoned", Severity.INFO, note, ())
        for e in engines
        for note in e.notes
    )
    out.extend(
        Finding("engine-server-info-probe", Severity.INFO, e.server_info_calls, ())
        for e in engines
        if e.server_info_calls and e.server_info_skipped
    )
    return out


def _health_noise(r: Reading) -> Cause | None:
    if r.status is not Status.HUNG:
        return None
    ok = [
        o.answer
        for o in r.world.snapshot.joined(HTTP_ANSWERS)
        if o.answer.path in ("/health", "/metrics") and o.answer.status == 200
    ]
    if not ok:
        return None
    return cause(
        "health-is-not-progress",
        Severity.INFO,
        "Engines answer /health or /metrics with 200: those answers come from the HTTP process "
        "and do not show progress (THUDM/slime#1058: endless 'GET /health 200' while hung).",
        [f"GET {a.url}{a.path}: 200" for a in ok[:3]],
        [],
    )


def _pause_split_across_tokenizer_workers(r: Reading) -> Cause | None:
    """sgl-project/sglang#21235: with `--tokenizer-worker-num N`, `/pause_generation` and
    `/continue_generation` each set `is_pause` on the one tokenizer worker whose process took the
    request (tokenizer_manager.py `pause_generation` / `continue_generation`); after a pause and a
    continue that reached different workers one stays paused, and every `/generate` routed to it
    waits in `is_pause_cond.wait_for` for good. Fixed by PR#24462 (sglang-miles: PR#24769). The
    shape: an engine that holds requests at its HTTP layer while its scheduler has none and every
    pause was answered by a continue (`EngineState.HELD`), run by several tokenizer workers."""
    for e in read_engines(r.world):
        workers = [p for p in e.procs if p.kind is MemberKind.TOKENIZER_WORKER]
        if e.state is not EngineState.HELD or len(workers) < 2:
            continue
        pids = ", ".join(str(p.pid) for p in workers[:8])
        return cause(
            "known-tokenizer-worker-pause-split",
            Severity.WARNING,
            f"Engine {e.url} runs {len(workers)} tokenizer workers and holds requests that every "
            "pause/continue pair should have released: /pause_generation and "
            "/continue_generation reach one tokenizer worker each, so one worker can stay paused "
            "and hold every request routed to it (sgl-project/sglang#21235, fixed by PR#24462).",
            [*e.evidence[:3], f"sglang::tokenizer_worker processes of {e.url}: pids {pids}"],
            [
                f"py-spy dump --pid P for each tokenizer worker of {e.url} (pids {pids}): the "
                "paused one waits in `is_pause_cond.wait_for` under `generate_request`",
                "Run an SGLang with PR#24462 (sglang-miles: PR#24769), or start the engines "
                "without --tokenizer-worker-num",
            ],
        )
    return None


def _in_pause_call(t: ThreadRead) -> bool:
    """A thread waiting in HTTP below a pause call (SGLangEngine.pause_generation)."""
    if t.block is not Block.HTTP or t.block_index is None:
        return False
    return any(split_name(f.name)[1] in PAUSE_CALLERS for f in t.frames[t.block_index :])


def _pause_callers(world: World) -> list[tuple[Proc, ThreadRead]]:
    """Processes waiting in a pause's HTTP call at every sample they were read at (two or more)."""
    out: list[tuple[Proc, ThreadRead]] = []
    for p in world.procs:
        if len(p.reads) < 2:
            continue
        held = [next((t for t in r.threads if _in_pause_call(t)), None) for r in p.reads]
        last = held[-1]
        if last is not None and all(t is not None for t in held):
            out.append((p, last))
    return out


def _orphaned_pause(r: Reading) -> Cause | None:
    """sgl-project/sglang#33696 (the #39689 family; fix PR#33700, open): with
    `--tokenizer-worker-num N` (PR#24462) a tokenizer worker awaits one shared future for its pause
    and continue calls; a continue made while a pause waits replaces it, and the pause's HTTP call
    never returns though the broadcasts were applied. The shape: `/pause_generation` in flight at
    the engine's HTTP layer in every sample while the engine is not paused by its own evidence and
    holds no request for the pause to drain (a draining pause is the engine's STUCK state), and a
    caller waiting in that HTTP call at every sample."""
    if r.status is not Status.HUNG:
        return None
    callers = _pause_callers(r.world)
    for e in read_engines(r.world):
        if PAUSE_CALL not in e.calls_held or e.state in (EngineState.PAUSED, *HUNG_ENGINE_STATES):
            continue
        if (e.in_flight or 0) > 0:
            continue
        mine = [c for c in callers if c[0].engine_url == e.url] or callers
        if not mine:
            continue
        proc, thread = mine[0]
        return cause(
            "known-orphaned-pause",
            Severity.WARNING,
            f"Engine {e.url}: its /pause_generation has been in flight in every sample while the "
            f"engine is not paused by its evidence (state {e.state.value}) and holds no request "
            "for a pause to drain, "
            f"and {proc.label} (pid {proc.pid}) waits in that HTTP call: the pause call is "
            "orphaned. With --tokenizer-worker-num, a pause and a continue made together on one "
            "tokenizer worker share one completion future, and the first call never returns "
            "(sgl-project/sglang#33696, fix PR#33700).",
            [
                f"{call_request(PAUSE_CALL, e.url)} in flight (sglang:http_requests_active) "
                "in every sample",
                *e.evidence[:2],
                f"{proc.label} (pid {proc.pid}): {thread.describe()}",
            ],
            [
                f"py-spy dump --pid {proc.pid}: the caller still waits in the pause's HTTP call",
                "The engine serves (it is not paused): the stuck call can only be abandoned; "
                "make one control caller at a time send pause / continue to an engine, or run "
                "an SGLang with PR#33700",
            ],
        )
    return None


ANALYSIS = SourceAnalysis(
    name="engines",
    gives=(SGLANG, STACKS),
    progress=progress,
    suspects=suspects,
    evidence=evidence,
    messages=MESSAGES,
    causes=(_health_noise, _pause_split_across_tokenizer_workers, _orphaned_pause),
    findings=lambda r: engine_findings(read_engines(r.world), r.status),
)
