"""Who the others wait for. Each source names suspects on its own; `merge` joins them by identity.

Sources (each independent of the others): NCCL RAS (missing ranks, ranks behind in collective counts),
the flight recorder (a rank whose last enqueued collective is behind its peers'), NVML (the idle GPU
among GPUs busy-waiting in a collective), stacks (the train rank that is not in the collective its
peers wait in), SGLang HTTP (engines dead, unresponsive, stuck with requests in flight), the
RolloutManager's event loop (reward code hogging it, or requests that never reach an engine), the
driver (everyone idle but it), Ray state (actors of the running job that died).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from slime_hangdoctor.analysis.engines import EngineRead, EngineState
from slime_hangdoctor.analysis.gpu import GpuRead, GpuState, gpu_by_index
from slime_hangdoctor.analysis.signatures import COLLECTIVE_BLOCKS, Block, split_name
from slime_hangdoctor.analysis.stacks import ProcessRead, find_stage
from slime_hangdoctor.analysis.world import Proc, World
from slime_hangdoctor.facts import FrDump, FrEntry, HttpAnswer, RasCommunicator, RasRank
from slime_hangdoctor.verdict import Culprit, Role, Stage

STRONG = 3  # the source names this process as the one missing (RAS, FR, dead engine)
MEDIUM = 2
WEAK = 1


@dataclass(frozen=True)
class Suspect:
    source: str  # ras | flight_recorder | nvml | stacks | sglang | rollout | driver | ray | ...
    role: Role
    why: str
    evidence: tuple[str, ...] = ()
    weight: int = WEAK
    pid: int | None = None
    node_ip: str | None = None
    rank: int | None = None
    engine_url: str | None = None
    actor_id: str | None = None
    gpu: int | None = None
    stage: Stage | None = None  # the stage this evidence points at (e.g. the stuck collective's)
    waits_elsewhere: bool = False  # the suspect itself waits on something else (chain continues)


def _from_proc(proc: Proc | None, **kw: object) -> dict[str, object]:
    """Identity fields of a suspect, filled from what the world knows about the process."""
    out: dict[str, object] = dict(kw)
    if proc is None:
        return out
    known: dict[str, object] = {
        "pid": proc.pid,
        "node_ip": proc.node_ip,
        "rank": proc.rank,
        "engine_url": proc.engine_url,
        "actor_id": proc.actor_id,
        "gpu": proc.gpu.index if proc.gpu is not None else None,
    }
    for key, value in known.items():
        if out.get(key) is None and value is not None:
            out[key] = value
    return out


def _suspect(source: str, role: Role, why: str, proc: Proc | None, **kw: object) -> Suspect:
    fields = _from_proc(proc, **kw)
    return Suspect(source=source, role=role, why=why, **fields)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- NCCL RAS


def ras_behind(comm: RasCommunicator) -> tuple[list[RasRank], str]:
    """Ranks behind their peers in some collective's launch count, and which op shows it."""
    ops = sorted({op for r in comm.ranks for op in r.collective_counts})
    for op in ops:
        counts = [(r, r.collective_counts.get(op)) for r in comm.ranks if not r.missing]
        values = [c for _, c in counts if c is not None]
        if len(values) < 2 or min(values) == max(values):
            continue
        top = max(values)
        return [r for r, c in counts if c is not None and c < top], f"{op} {top}"
    launched = [r.launched_up_to for r in comm.ranks if r.launched_up_to is not None]
    if launched and comm.errors and "MISMATCH" in comm.errors.upper():
        top = max(launched)
        behind = [
            r
            for r in comm.ranks
            if not r.missing and (r.launched_up_to is None or r.launched_up_to < top)
        ]
        return behind, f"operation {top}"
    return [], ""


def ras_suspects(world: World, moving_comms: set[str]) -> list[Suspect]:
    out: list[Suspect] = []
    seen: set[str] = set()
    latest: dict[str | None, int] = {}
    for obs in world.snapshot.ras:
        latest[obs.node_ip] = max(latest.get(obs.node_ip, -1), obs.sample)
    for obs in world.snapshot.ras:
        if obs.sample != latest[obs.node_ip]:
            continue
        frozen = frozen_ras_comms(world)
        for comm in obs.report.communicators:
            if comm.hash in seen or comm.hash in moving_comms:
                continue
            seen.add(comm.hash)
            out.extend(_ras_comm_suspects(world, comm, comm.hash in frozen))
    waiters = _ras_waiters(world, moving_comms)
    root = [s for s in out if s.pid not in waiters or "missing" in s.why]
    return root or out


def _ras_waiters(world: World, moving_comms: set[str]) -> set[int | None]:
    """Pids that launched a collective their peers have not (they wait in it somewhere): in a
    cascade they show up 'behind' in another communicator, but they are victims."""
    out: set[int | None] = set()
    for obs in world.snapshot.ras:
        for comm in obs.report.communicators:
            if comm.hash in moving_comms:
                continue
            behind, _ = ras_behind(comm)
            if behind and mismatch_weight(comm, False) != 0:
                lagging = {id(r) for r in behind}
                out |= {r.pid for r in comm.ranks if id(r) not in lagging and not r.missing}
    return out


def _ras_rank_suspect(
    world: World, comm: RasCommunicator, r: RasRank, why: str, weight: int = STRONG
) -> Suspect:
    proc = world.find(r.pid, r.host)
    gpu = r.nvml_dev if r.nvml_dev is not None else (proc.gpu.index if proc and proc.gpu else None)
    role = proc.role if proc and proc.role else Role.TRAIN_RANK
    evidence: tuple[str, ...] = (
        f"NCCL RAS communicator {comm.hash}: {comm.status or '?'} {comm.errors or '?'}",
        *comm.messages[:6],
    )
    return _suspect(
        "ras",
        role,
        why,
        proc,
        pid=r.pid,
        node_ip=r.host or (proc.node_ip if proc else None),
        rank=proc.rank if proc and proc.rank is not None else r.rank,
        gpu=gpu,
        evidence=evidence,
        weight=weight,
    )


def mismatch_weight(comm: RasCommunicator, frozen: bool) -> int:
    """How much a difference in launch counts means. NCCL's own verdict (text form: MISMATCH / OK)
    decides; without it (JSON only) one reading cannot tell a straggler from launch skew in a busy
    job (the busy capture reads 21984 vs 21985), unless the counts stayed frozen across samples."""
    errors = (comm.errors or "").upper()
    if "MISMATCH" in errors:
        return STRONG
    if errors:
        return 0
    return STRONG if frozen else WEAK


def _ras_comm_suspects(world: World, comm: RasCommunicator, frozen: bool) -> list[Suspect]:
    out: list[Suspect] = []
    for r in comm.ranks:
        if r.missing:
            state = "considered dead" if r.considered_dead else "not responding"
            out.append(
                _ras_rank_suspect(
                    world,
                    comm,
                    r,
                    f"NCCL RAS: rank {r.rank} is missing from the communicator "
                    f"({state}); its peers cannot complete their collectives",
                )
            )
    behind, op = ras_behind(comm)
    weight = mismatch_weight(comm, frozen)
    if weight and behind and len(behind) < len([r for r in comm.ranks if not r.missing]):
        for r in behind:
            launched = r.launched_up_to
            detail = (
                f"launched {r.collective_counts.get(op.split()[0], 0)}"
                if r.collective_counts
                else (f"launched up to {launched}" if launched is not None else "launched none")
            )
            out.append(
                _ras_rank_suspect(
                    world,
                    comm,
                    r,
                    f"NCCL RAS: rank {r.rank} is behind its peers ({detail}; peers reached "
                    f"{op}): it never entered the collective they wait in",
                    weight,
                )
            )
    return out


# --------------------------------------------------------------------------- flight recorder


@dataclass(frozen=True)
class FrCursor:
    rank: int
    pid: int | None
    enqueued: int
    completed: int
    pending: FrEntry | None  # the newest entry that has not completed


@dataclass(frozen=True)
class FrGroup:
    """One process group across the ranks that dumped it."""

    pg: str
    cursors: tuple[FrCursor, ...]
    stuck: FrEntry | None = None  # the collective the waiting ranks are in
    behind: tuple[FrCursor, ...] = ()
    waiting: tuple[FrCursor, ...] = ()


def _cursor(dump: FrDump, pg: str) -> FrCursor | None:
    entries = [
        e for e in dump.entries if str(e.pg_id) == pg and not e.is_p2p and e.collective_seq_id > 0
    ]
    status = dump.pg_status.get(pg, {})
    enq = status.get("last_enqueued_collective")
    done = status.get("last_completed_collective")
    if enq is None:
        enq = max((e.collective_seq_id for e in entries), default=None)
    if done is None:
        done = max((e.collective_seq_id for e in entries if e.state == "completed"), default=0)
    if enq is None:
        return None
    pending = [e for e in entries if e.state != "completed" and e.collective_seq_id > done]
    return FrCursor(
        dump.rank,
        dump.pid,
        int(enq),
        int(done),
        max(pending, key=lambda e: e.collective_seq_id) if pending else None,
    )


def fr_groups(world: World) -> list[FrGroup]:
    dumps: dict[int, FrDump] = {f.dump.rank: f.dump for f in world.snapshot.flight}
    pgs = sorted(
        {str(e.pg_id) for d in dumps.values() for e in d.entries if e.pg_id is not None}
        | {pg for d in dumps.values() for pg in d.pg_status}
    )
    out: list[FrGroup] = []
    for pg in pgs:
        cursors = tuple(c for c in (_cursor(d, pg) for d in dumps.values()) if c is not None)
        if len(cursors) < 2:
            out.append(FrGroup(pg, cursors))
            continue
        top = max(c.enqueued for c in cursors)
        waiting = tuple(c for c in cursors if c.enqueued > c.completed)
        behind = tuple(c for c in cursors if c.enqueued < top)
        stuck = next(
            (c.pending for c in waiting if c.pending is not None and c.enqueued == top), None
        )
        out.append(FrGroup(pg, cursors, stuck, behind if waiting else (), waiting))
    return out


def fr_stage(entry: FrEntry | None) -> Stage | None:
    if entry is None:
        return None
    stage, _, _ = find_stage(entry.frames)
    return stage


def _fr_entry_text(e: FrEntry) -> str:
    callers = [f.name for f in e.frames if "torch/distributed" not in f.filename][:3]
    return f"collective #{e.collective_seq_id} {e.op} ({e.state})" + (
        f" called from {' <- '.join(callers)}" if callers else ""
    )


def fr_suspects(world: World) -> list[Suspect]:
    out: list[Suspect] = []
    groups = fr_groups(world)
    # a rank with a collective in flight in some group waits there: behind elsewhere is a cascade
    in_flight = {c.rank for g in groups for c in g.cursors if c.pending is not None}
    any_root = any(c.rank not in in_flight for g in groups if g.stuck is not None for c in g.behind)
    for g in groups:
        if not g.behind or g.stuck is None:
            continue
        roots = [c for c in g.behind if c.rank not in in_flight or not any_root]
        stage = fr_stage(g.stuck)
        peers = ", ".join(
            f"rank {c.rank} (enqueued #{c.enqueued}, completed #{c.completed})" for c in g.waiting
        )
        for c in roots:
            proc = world.find(c.pid) if c.pid is not None else None
            if proc is None:
                proc = world.train_rank(c.rank)
            why = (
                f"flight recorder: rank {c.rank} never entered {_fr_entry_text(g.stuck)} on "
                f"process group {g.pg}; its last collective is #{c.enqueued} while {peers} wait"
            )
            out.append(
                _suspect(
                    "flight_recorder",
                    proc.role if proc and proc.role else Role.TRAIN_RANK,
                    why,
                    proc,
                    pid=c.pid,
                    rank=c.rank,
                    stage=stage,
                    weight=STRONG,
                    evidence=tuple(
                        f"rank {x.rank}: last enqueued #{x.enqueued}, last completed "
                        f"#{x.completed}"
                        + (f", in flight: {_fr_entry_text(x.pending)}" if x.pending else "")
                        for x in g.cursors
                    ),
                )
            )
    return out


# --------------------------------------------------------------------------- NVML


def _waits_on_others(read: ProcessRead | None) -> bool:
    """The process waits for peers or another actor: a victim rather than the missing party."""
    if read is None:
        return False
    return read.block in COLLECTIVE_BLOCKS or read.block in (Block.RAY_GET, Block.HTTP)


def gpu_suspects(world: World, engine_stage: bool) -> list[Suspect]:
    stuck = [g for g in world.gpus if g.state is GpuState.STUCK]
    if not stuck:
        return []
    job_pids = {p.pid for p in world.procs if p.role in (Role.TRAIN_RANK, Role.SGLANG_ENGINE)}
    allowed_roles = {Role.TRAIN_RANK} | ({Role.SGLANG_ENGINE} if engine_stage else set())
    idle: list[tuple[GpuRead, Proc | None]] = []
    for g in world.gpus:
        if g.state is not GpuState.IDLE or not g.pids:
            continue
        procs = [world.find(pid, g.node_ip) for pid, _ in g.pids]
        allowed = [p for p in procs if p is not None and p.role in allowed_roles]
        if job_pids and not allowed:
            continue
        proc = allowed[0] if allowed else None
        if _waits_on_others(proc.latest if proc else None):
            continue
        idle.append((g, proc))
    if not idle or len(idle) > max(1, len(stuck)):
        return []
    stuck_text = "; ".join(g.evidence() for g in stuck[:4])
    out: list[Suspect] = []
    for g, proc in idle:
        role = proc.role if proc and proc.role else Role.TRAIN_RANK
        why = (
            f"NVML: {g.label} is idle while {', '.join(s.label for s in stuck[:4])} "
            "busy-wait in a collective (util ~100%, memory util ~0, no data moved): its process "
            "is not taking part"
        )
        out.append(
            _suspect(
                "nvml",
                role,
                why,
                proc,
                pid=proc.pid if proc else g.pids[0][0],
                node_ip=g.node_ip,
                gpu=g.index,
                weight=MEDIUM,
                evidence=(g.evidence(), stuck_text),
            )
        )
    return out


# --------------------------------------------------------------------------- stacks


def _op_of(read: ProcessRead) -> str:
    f = read.primary.block_frame
    return split_name(f.name)[1] if f is not None else read.block.value


def peer_groups(world: World) -> list[list[Proc]]:
    """Processes that run collectives together: the train ranks; the schedulers of one engine."""
    groups = [[p for p in world.by_role(Role.TRAIN_RANK) if p.latest is not None]]
    engines: dict[str, list[Proc]] = {}
    for p in world.by_role(Role.SGLANG_ENGINE):
        if p.kind == "scheduler" and p.latest is not None and p.engine_url:
            engines.setdefault(p.engine_url, []).append(p)
    groups += list(engines.values())
    return [g for g in groups if len(g) >= 2]


def stack_suspects(world: World) -> list[Suspect]:
    out: list[Suspect] = []
    for group in peer_groups(world):
        out += _odd_ones(group)
    return out


def _odd_ones(ranks: list[Proc]) -> list[Suspect]:
    in_coll = [p for p in ranks if p.latest is not None and p.latest.primary.in_collective]
    if not in_coll:
        return []
    role = ranks[0].role or Role.TRAIN_RANK
    outside = [p for p in ranks if p not in in_coll]
    if outside:
        victims = ", ".join(f"{p.label} ({_brief(p)})" for p in in_coll[:4])
        weight = MEDIUM if len(outside) <= len(in_coll) else WEAK
        return [
            _suspect(
                "stacks",
                role,
                f"stacks: {p.label} is not in the collective its peers wait in; it is "
                f"{p.latest.describe() if p.latest else '?'} (peers: {victims})",
                p,
                weight=weight,
                stage=p.latest.stage if p.latest else None,
                waits_elsewhere=p.latest is not None
                and p.latest.block
                in (
                    Block.RAY_GET,
                    Block.HTTP,
                    Block.WAIT,
                ),
                evidence=tuple(f"{q.label}: {_brief(q)}" for q in ranks[:8]),
            )
            for p in outside
        ]
    return _collective_minority(in_coll, role)


def _brief(p: Proc) -> str:
    return p.latest.describe() if p.latest else "no stack"


def _collective_minority(in_coll: list[Proc], role: Role) -> list[Suspect]:
    """All ranks wait in collectives: the odd op out, when the ranks are in one stage."""
    stages = {p.latest.stage for p in in_coll if p.latest}
    if len(stages) != 1:
        return []
    groups = Counter(_op_of(p.latest) for p in in_coll if p.latest)
    if len(groups) < 2:
        return []
    (top_op, top_n), *_ = groups.most_common()
    minority = [p for p in in_coll if p.latest and _op_of(p.latest) != top_op]
    if len(minority) >= top_n:
        return []
    return [
        _suspect(
            "stacks",
            role,
            f"stacks: {p.label} waits in {_op_of(p.latest) if p.latest else '?'} while "
            f"{top_n} peers wait in {top_op}: the peers issued different collectives",
            p,
            weight=WEAK,
            stage=p.latest.stage if p.latest else None,
            evidence=tuple(f"{q.label}: {_brief(q)}" for q in in_coll[:8]),
        )
        for p in minority
    ]


# --------------------------------------------------------------------------- engines


def _engine_proc(e: EngineRead) -> Proc | None:
    return e.server or (e.schedulers[0] if e.schedulers else None) or e.actor


def engine_suspects(world: World, engines: tuple[EngineRead, ...]) -> list[Suspect]:
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
        inside = _with_trainers(world, e)
        why = f"engine {e.url} {words[e.state]}"
        weight = weights[e.state]
        if inside and e.state is not EngineState.DEAD:
            why += (
                f" (its scheduler is {_brief(inside[0])}: it waits in the same collective as the "
                "trainers)"
            )
            weight = WEAK
        out.append(
            _suspect(
                "sglang",
                Role.SGLANG_ENGINE,
                why,
                proc,
                engine_url=e.url,
                node_ip=e.node_ip or (proc.node_ip if proc else None),
                weight=weight,
                stage=stage,
                evidence=e.evidence,
                waits_elsewhere=bool(inside),
            )
        )
    out.extend(_broadcast_absentees(world, engines))
    out.extend(_blocked_engine_actors(world, engines))
    out.extend(_dead_actors(world))
    out.extend(_dead_processes(world, {e.url for e in engines if e.state is EngineState.DEAD}))
    out.extend(_routers(world))
    return out


def _dead_processes(world: World, dead_engines: set[str]) -> list[Suspect]:
    """Slime processes seen in an earlier /proc sample and gone (or zombie) in the last one."""
    return [
        _suspect(
            "processes",
            p.role,
            f"{p.label} (pid {p.pid}) is gone from the process table: it died during the window",
            p,
            weight=STRONG,
        )
        for p in world.procs
        if p.role is not None and p.dead and (p.engine_url or "") not in dead_engines
    ]


def _routers(world: World) -> list[Suspect]:
    by_url: dict[str, list[HttpAnswer]] = {}
    last = max((o.sample for o in world.snapshot.http if o.kind == "router"), default=0)
    for o in world.snapshot.http:
        if o.kind == "router" and o.sample == last:
            by_url.setdefault(o.answer.url, []).append(o.answer)
    out: list[Suspect] = []
    for url, answers in by_url.items():
        refused = all(a.status is None for a in answers)
        if not refused and not any(a.status == 503 for a in answers):
            continue
        proc = next((p for p in world.by_role(Role.ROUTER) if p.engine_url == url), None)
        why = (
            f"router {url} does not answer ({answers[0].error or 'no answer'}): no request "
            "reaches an engine"
            if refused
            else f"router {url} answers 503 (no available workers)"
        )
        out.append(
            _suspect(
                "sglang",
                Role.ROUTER,
                why,
                proc,
                engine_url=url,
                weight=STRONG if refused else WEAK,
                stage=Stage.ROLLOUT_DISPATCH,
                evidence=tuple(f"GET {a.url}{a.path}: {a.status or a.error}" for a in answers[:3]),
            )
        )
    return out


def _engine_stage(e: EngineRead) -> Stage | None:
    for p in (*e.schedulers, e.actor):
        if p is not None and p.latest is not None and p.latest.stage is not None:
            return p.latest.stage
    return None


def _trainers_in(world: World, stages: set[Stage]) -> list[Proc]:
    return [
        p
        for p in world.by_role(Role.TRAIN_RANK)
        if p.latest is not None and p.latest.stage in stages and p.latest.primary.waiting
    ]


_SHARED_STAGES = (Stage.NCCL_BROADCAST, Stage.WEIGHT_SYNC)


def _with_trainers(world: World, e: EngineRead) -> list[Proc]:
    """Schedulers of `e` that wait in a collective shared with trainers that wait in the same
    weight-sync stage (the broadcast group): such a scheduler is a victim like the trainers."""
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
        if read.stage not in _ENGINE_WAIT_STAGES or _with_trainers(world, e):
            continue
        out.append(
            _suspect(
                "stacks",
                Role.SGLANG_ENGINE,
                f"engine {e.url}: its SGLangEngine actor is {read.describe()}: the server never "
                "answers that call (slime's engine requests carry no timeout)",
                actor,
                engine_url=e.url,
                weight=MEDIUM,
                stage=read.stage,
                evidence=tuple(f.where for f in read.primary.frames[:6]),
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
            _suspect(
                "stacks",
                Role.SGLANG_ENGINE,
                f"engine {e.url}: scheduler pid {s.pid} is not in the weight "
                f"{'broadcast' if stage is Stage.NCCL_BROADCAST else 'group creation'} the "
                f"trainers wait in; it is {_brief(s)}",
                s,
                engine_url=e.url,
                weight=MEDIUM,
                stage=stage,
                evidence=tuple(f"{p.label}: {_brief(p)}" for p in waiting[:4]),
            )
        )
    return out


def _running_job_ids(world: World) -> set[str]:
    return {j.job_id for j in world.snapshot.jobs if j.status == "RUNNING" and j.job_id}


_ACTOR_ROLES = {
    "MegatronTrainRayActor": Role.TRAIN_RANK,
    "RolloutManager": Role.ROLLOUT_MANAGER,
    "SGLangEngine": Role.SGLANG_ENGINE,
}


def _dead_actors(world: World) -> list[Suspect]:
    jobs = _running_job_ids(world)
    out: list[Suspect] = []
    for a in world.snapshot.actors:
        role = _ACTOR_ROLES.get(a.class_name)
        if role is None or a.state != "DEAD" or not jobs or a.job_id not in jobs:
            continue
        out.append(
            Suspect(
                "ray",
                role,
                f"Ray: {a.class_name} actor {a.actor_id[:12]} of the running job is DEAD",
                weight=STRONG,
                pid=a.pid,
                node_ip=a.node_ip,
                actor_id=a.actor_id,
            )
        )
    return out


# --------------------------------------------------------------------------- rollout manager


def rollout_suspects(world: World, engines: tuple[EngineRead, ...]) -> list[Suspect]:
    out: list[Suspect] = []
    for rm in world.by_role(Role.ROLLOUT_MANAGER):
        read = rm.latest
        loop = read.loop if read else None
        if read is None or loop is None:
            continue
        if loop.block is Block.CPU:
            both = all(
                r.loop is not None and r.loop.block is Block.CPU and r.loop.stage is loop.stage
                for r in rm.reads
            )
            stage = loop.stage if loop.stage is Stage.REWARD else Stage.ROLLOUT_DISPATCH
            what = "the reward function" if stage is Stage.REWARD else "synchronous code"
            out.append(
                _suspect(
                    "rollout",
                    Role.ROLLOUT_MANAGER,
                    f"the rollout event loop is CPU-bound in {what} ({loop.describe()}): while "
                    "it runs, no rollout coroutine can send or receive a request"
                    + (" (in every sample)" if both and len(rm.reads) > 1 else ""),
                    rm,
                    stage=stage,
                    weight=MEDIUM if both else WEAK,
                    evidence=tuple(f.where for f in loop.frames[:8]),
                )
            )
        elif loop.block not in (Block.EVENT_LOOP, Block.UNKNOWN):
            out.append(
                _suspect(
                    "rollout",
                    Role.ROLLOUT_MANAGER,
                    f"the rollout event loop is blocked in a synchronous call "
                    f"({loop.describe()}): every rollout coroutine waits behind it",
                    rm,
                    stage=loop.stage or read.stage or Stage.ROLLOUT_DISPATCH,
                    weight=MEDIUM,
                    evidence=tuple(f.where for f in loop.frames[:8]),
                )
            )
        elif read.stage in (Stage.ROLLOUT_DISPATCH, Stage.EVAL):
            out.extend(_requests_lost(rm, read, engines))
    return out


def _requests_lost(rm: Proc, read: ProcessRead, engines: tuple[EngineRead, ...]) -> list[Suspect]:
    known = [e for e in engines if e.in_flight is not None]
    if not known or any((e.in_flight or 0) > 0 or e.moving for e in known):
        return []
    return [
        _suspect(
            "rollout",
            Role.ROLLOUT_MANAGER,
            "rollout coroutines are waiting on I/O (event loop idle in select) but no engine has "
            "a request running or queued: the requests are stuck before the engines (router, a "
            "remote reward service, or a custom generate function awaiting something)",
            rm,
            stage=read.stage,
            weight=WEAK,
            evidence=tuple(f"engine {e.url}: {', '.join(e.evidence)}" for e in known[:4]),
        )
    ]


# --------------------------------------------------------------------------- driver


def driver_suspects(world: World) -> list[Suspect]:
    drivers = [p for p in world.by_role(Role.DRIVER) if p.latest is not None]
    actors = [
        p
        for p in world.procs
        if p.role in (Role.TRAIN_RANK, Role.ROLLOUT_MANAGER)
        and p.member is not None
        and p.member.kind == "actor"
    ]
    if not drivers or not actors:
        return []
    idle = all(_actor_idle(p) for p in actors)
    if not idle:
        return []
    d = drivers[0]
    read = d.latest
    if read is None:
        return []
    if read.block is Block.RAY_GET:
        why = (
            "the driver waits in ray.get but no slime actor is running a method: the result "
            "it waits for is not being computed (a task that died, or an object never produced)"
        )
        weight = WEAK
    else:
        why = f"every slime actor is idle and the driver is {read.describe()}"
        weight = MEDIUM
    return [_suspect("driver", Role.DRIVER, why, d, weight=weight, stage=read.stage)]


def _actor_idle(p: Proc) -> bool:
    if p.latest is not None:
        return p.latest.block is Block.IDLE_WORKER
    return p.member is not None and p.member.method is None


# --------------------------------------------------------------------------- end of the ray.get chain

_CHAIN_END = frozenset({Block.PARKED, Block.SLEEP, Block.HTTP, Block.SUBPROCESS})


def chain_end_suspects(world: World) -> list[Suspect]:
    """Everyone waits; some wait in ray.get on other actors. The actors that wait on something
    outside Ray (their own HTTP server, a sleep-poll, a child process) end the chain."""
    reads = [(p, p.latest) for p in world.procs if p.role is not None and p.latest is not None]
    if not reads or any(
        r.cpu_busy or not (r.primary.waiting or r.block is Block.PARKED) for _, r in reads
    ):
        return []
    if not any(r.block is Block.RAY_GET for _, r in reads):
        return []
    ends = [
        (p, r)
        for p, r in reads
        if r.block in _CHAIN_END and r.stage is not None and p.role is not Role.DRIVER
    ]
    if not ends or len(ends) > 4:
        return []
    waiting = [p for p, r in reads if r.block is Block.RAY_GET]
    return [
        _suspect(
            "stacks",
            p.role or Role.TRAIN_RANK,
            f"stacks: {p.label} is where the chain of ray.get waits ends: it is {r.describe()} "
            f"(waiting on it: {', '.join(q.label for q in waiting[:4])})",
            p,
            weight=WEAK,
            stage=r.stage,
            evidence=tuple(f.where for f in r.primary.frames[:6]),
        )
        for p, r in ends
    ]


# --------------------------------------------------------------------------- merge


@dataclass
class Merged:
    role: Role
    suspects: list[Suspect] = field(default_factory=list)

    @property
    def sources(self) -> set[str]:
        return {s.source for s in self.suspects}

    @property
    def score(self) -> int:
        best: dict[str, int] = {}
        for s in self.suspects:
            best[s.source] = max(best.get(s.source, 0), s.weight)
        total = sum(best.values())
        if all(s.waits_elsewhere for s in self.suspects):
            total -= 1
        return total

    def first(self, attr: str) -> object:
        for s in sorted(self.suspects, key=lambda x: -x.weight):
            v = getattr(s, attr)
            if v is not None:
                return v
        return None

    def culprit(self) -> Culprit:
        ordered = sorted(self.suspects, key=lambda s: -s.weight)
        whys = list(dict.fromkeys(s.why for s in ordered))
        return Culprit(
            role=self.role,
            why=" | ".join(whys[:4]),
            node_ip=self.first("node_ip"),  # type: ignore[arg-type]
            pid=self.first("pid"),  # type: ignore[arg-type]
            rank=self.first("rank"),  # type: ignore[arg-type]
            engine_url=self.first("engine_url"),  # type: ignore[arg-type]
            actor_id=self.first("actor_id"),  # type: ignore[arg-type]
            gpu=self.first("gpu"),  # type: ignore[arg-type]
        )

    @property
    def stage(self) -> Stage | None:
        for s in sorted(self.suspects, key=lambda x: -x.weight):
            if s.stage is not None:
                return s.stage
        return None


def merge(suspects: list[Suspect], world: World) -> list[Merged]:
    """Join suspects that name the same process (pid), engine (url) or rank."""
    groups: list[Merged] = []
    for s in suspects:
        target = next((g for g in groups if _same(g, s, world)), None)
        if target is None:
            target = Merged(s.role)
            groups.append(target)
        target.suspects.append(s)
    return sorted(groups, key=lambda g: (-g.score, -max(s.weight for s in g.suspects)))


def _same(g: Merged, s: Suspect, world: World) -> bool:
    for o in g.suspects:
        if s.engine_url and o.engine_url and s.role is o.role:
            if s.engine_url == o.engine_url:
                return True  # an engine is its actor, server and schedulers together
            continue
        if s.pid is not None and o.pid is not None:
            if s.pid == o.pid and (
                s.node_ip is None or o.node_ip is None or s.node_ip == o.node_ip
            ):
                return True
            continue
        if s.engine_url and o.engine_url and s.engine_url == o.engine_url:
            return True
        if (
            s.role is Role.TRAIN_RANK
            and o.role is Role.TRAIN_RANK
            and s.rank is not None
            and s.rank == o.rank
        ):
            return True
        if s.gpu is not None and o.gpu is not None and s.gpu == o.gpu:
            same_node = s.node_ip is None or o.node_ip is None or s.node_ip == o.node_ip
            if same_node and gpu_by_index(world.gpus, s.gpu, s.node_ip) is not None:
                return True
    return False


def frozen_ras_comms(world: World) -> set[str]:
    """RAS communicators read in two samples whose collective counts did not change."""
    totals: dict[str, dict[int, int]] = {}
    for obs in world.snapshot.ras:
        for c in obs.report.communicators:
            total = sum(sum(r.collective_counts.values()) for r in c.ranks)
            totals.setdefault(c.hash, {})[obs.sample] = total
    return {h for h, by in totals.items() if len(by) >= 2 and len(set(by.values())) == 1}


def moving_ras_comms(world: World) -> set[str]:
    """RAS communicators whose collective counts rose between samples (a mismatch there is noise)."""
    first: dict[str, int] = {}
    moving: set[str] = set()
    for obs in sorted(world.snapshot.ras, key=lambda o: o.sample):
        for c in obs.report.communicators:
            total = sum(sum(r.collective_counts.values()) for r in c.ranks)
            if c.hash in first and total > first[c.hash]:
                moving.add(c.hash)
            first.setdefault(c.hash, total)
    return moving
