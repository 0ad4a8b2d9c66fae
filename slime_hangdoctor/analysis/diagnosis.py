"""`diagnose(snapshot, topology) -> Diagnosis`: the verdict, per-process rows and the deciding stack.

Status: idle (no slime job), unknown (nothing usable), progressing (any source shows real progress),
hung (no progress and evidence of a hang). The blocked stage comes, in order, from a reward-bound
event loop, the flight recorder's stuck collective, the train ranks waiting in collectives, the
culprit's own stack, the majority of stacks, then the running Ray methods.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

from slime_hangdoctor.analysis import advice
from slime_hangdoctor.analysis.blame import Blame, assign
from slime_hangdoctor.analysis.blocked import blocked_for, evidence_time
from slime_hangdoctor.analysis.merge import Merged, merge
from slime_hangdoctor.analysis.readers.cuda_spin import cuda_spins
from slime_hangdoctor.analysis.readers.nvml import SPINNING_WORDS
from slime_hangdoctor.analysis.readers.proof import Progress
from slime_hangdoctor.analysis.readers.pyspy import STACKS, highlight
from slime_hangdoctor.analysis.readers.sglang_http import EngineRead, read_engines
from slime_hangdoctor.analysis.signatures import (
    Block,
    layout_hint,
    method_stage,
)
from slime_hangdoctor.analysis.source_analysis import (
    MEDIUM,
    Cause,
    Evidence,
    Reading,
    Reads,
    Section,
    assess,
    by_of,
    evidence_messages,
    find_suspects,
    first_stage,
    hang_evidence,
    holding_sources,
    idle_findings,
    known_causes,
    part_steps,
    section_findings,
    stage_hint,
)
from slime_hangdoctor.analysis.waits import find_waits
from slime_hangdoctor.analysis.world import Proc, World, build_world
from slime_hangdoctor.parsers.flight_recorder import SPEC as FLIGHT_RECORDER
from slime_hangdoctor.parsers.nccl_ras import SPEC as RAS
from slime_hangdoctor.parsers.nvml import GPU_SERIES
from slime_hangdoctor.parsers.processes import SPEC as PROCESSES
from slime_hangdoctor.parsers.pyspy import ALL_STACKS
from slime_hangdoctor.parsers.ray_state import (
    ACTOR_ALIVE,
    ACTOR_BEING_CREATED,
    JOB_RUNNING,
    RAY_STATE,
    TASK_RUNNING,
    RayTask,
)
from slime_hangdoctor.parsers.sglang import HTTP_ANSWERS, HttpPeer
from slime_hangdoctor.snapshot import Snapshot
from slime_hangdoctor.topology import SLIME_ACTOR_CLASSES, MemberKind, Topology
from slime_hangdoctor.verdict import (
    Confidence,
    Culprit,
    Diagnosis,
    Finding,
    JobRef,
    NextStep,
    Role,
    RoleRow,
    Severity,
    StackExcerpt,
    Stage,
    Status,
    Verdict,
    unknown_verdict,
)

# Tie-break when stacks disagree: the more specific stage wins.
_STAGE_ORDER = (
    Stage.NCCL_BROADCAST,
    Stage.WEIGHT_SYNC,
    Stage.REWARD,
    Stage.OFFLOAD_ONLOAD,
    Stage.CHECKPOINT,
    Stage.EVAL,
    Stage.ROLLOUT_DISPATCH,
    Stage.TRAIN,
    Stage.STARTUP,
)


# --------------------------------------------------------------------------- usable / idle


def _usable(s: Snapshot) -> bool:
    ray = s.joined(RAY_STATE)
    return bool(
        s.joined(ALL_STACKS)
        or s.facts(PROCESSES)
        or s.joined(GPU_SERIES)
        or s.joined(HTTP_ANSWERS)
        or s.facts(RAS)
        or s.facts(FLIGHT_RECORDER)
        or ray.actors
        or ray.jobs
    )


def _no_job(world: World) -> bool:
    snap = world.snapshot
    if world.topology.members:
        return False
    if any(p.role is not None and p.reads for p in world.procs):
        return False
    strangers = {e.url.rstrip("/") for e in world.topology.listed}  # only a router lists them
    if (
        any(snap.facts(RAS))
        or any(snap.facts(FLIGHT_RECORDER))
        or any(
            o.kind is HttpPeer.ENGINE and o.answer.url.rstrip("/") not in strangers
            for o in snap.joined(HTTP_ANSWERS)
        )
    ):
        return False
    running = any(j.status == JOB_RUNNING for j in snap.joined(RAY_STATE).jobs)
    alive = any(
        a.class_name in SLIME_ACTOR_CLASSES and a.state == ACTOR_ALIVE
        for a in snap.joined(RAY_STATE).actors
    )
    return (
        not running and not alive and (snap.joined(RAY_STATE).seen or bool(snap.facts(PROCESSES)))
    )


# --------------------------------------------------------------------------- stage


def _majority(stages: list[Stage]) -> Stage | None:
    if not stages:
        return None
    counts = Counter(stages)
    top = max(counts.values())
    best = [s for s in _STAGE_ORDER if counts.get(s) == top]
    return best[0] if best else stages[0]


def _in_broadcast(world: World) -> bool:
    """Trainers / engines wait inside the weight broadcast while the rest of the weight sync waits
    for it (the non-source ranks sit in a Gloo barrier of the same update): the broadcast blocks."""
    stages = {
        p.latest.stage
        for p in world.procs
        if p.role in (Role.TRAIN_RANK, Role.SGLANG_ENGINE)
        and p.latest is not None
        and p.latest.stage is not None
        and p.latest.primary.waiting
    }
    return Stage.NCCL_BROADCAST in stages and stages <= {Stage.NCCL_BROADCAST, Stage.WEIGHT_SYNC}


def startup_chain(world: World) -> tuple[str, ...]:
    """Why the job is still starting: a slime actor of the running job not yet created (its
    constructor runs), or a slime process that waits inside a constructor / `init` / engine
    launch. Nothing has been dispatched then, whatever stage an engine's own loop shows."""
    jobs = {
        j.job_id
        for j in world.snapshot.joined(RAY_STATE).jobs
        if j.status == JOB_RUNNING and j.job_id
    }
    out = [
        f"Ray: {a.class_name} actor {a.actor_id[:12]} is {a.state}"
        for a in world.snapshot.joined(RAY_STATE).actors
        if a.class_name in SLIME_ACTOR_CLASSES
        and a.state in ACTOR_BEING_CREATED
        and (not jobs or a.job_id in jobs)
    ]
    for p in world.procs:
        read = p.latest
        if p.role is None or read is None or read.stage is not Stage.STARTUP:
            continue
        if read.cpu_busy and read.block is Block.CPU:
            continue  # starting up and working: slow, not waiting
        out.append(f"{p.label} waits in start-up: {read.describe()}")
    return tuple(out)


def decide_stage(world: World, merged: list[Merged]) -> Stage:
    for m in merged[:3]:
        if m.stage is Stage.REWARD:
            return Stage.REWARD
    if (stage := first_stage(world)) is not None:
        return stage
    if _in_broadcast(world):
        return Stage.NCCL_BROADCAST
    if startup_chain(world):
        return Stage.STARTUP
    victims = [
        p.latest.stage
        for p in world.procs
        if p.latest is not None
        and p.latest.stage is not None
        and p.latest.primary.in_collective
        and p.role is not None
    ]
    if (stage := _majority(victims)) is not None:
        return stage
    if merged and merged[0].stage is not None:
        stage = merged[0].stage
        if stage is Stage.ROLLOUT_DISPATCH:  # a scheduler's batch loop: rollout or eval?
            rm = [p.latest.stage for p in world.by_role(Role.ROLLOUT_MANAGER) if p.latest]
            if Stage.EVAL in rm:
                return Stage.EVAL
        return stage
    stacked = [
        p.latest.stage
        for p in world.procs
        if p.latest is not None and p.latest.stage is not None and p.role is not None
    ]
    if (stage := _majority(stacked)) is not None:
        return stage
    methods = [
        sig.stage
        for p in world.procs
        if p.member is not None
        and (sig := method_stage(p.member.class_name, p.member.method)) is not None
    ]
    return _majority(methods) or Stage.UNKNOWN


def current_stage(world: World) -> Stage | None:
    stacked = [p.latest.stage for p in world.procs if p.latest is not None and p.latest.stage]
    return _majority([s for s in stacked if s is not None])


# --------------------------------------------------------------------------- rows & excerpt


def _row_stage(p: Proc) -> Stage:
    if p.latest is not None:
        if p.latest.stage is not None:
            return p.latest.stage
        if p.latest.block is Block.IDLE_WORKER:
            return Stage.NONE
    if p.member is not None:
        sig = method_stage(p.member.class_name, p.member.method)
        if sig is not None:
            return sig.stage
    return Stage.UNKNOWN


def _tasks_by_pid(world: World) -> dict[int | None, tuple[RayTask, ...]]:
    """Ray's tasks by their worker's pid, in Ray's order (one pass: issue 46)."""
    found: dict[int | None, list[RayTask]] = {}
    for t in world.snapshot.joined(RAY_STATE).tasks:
        found.setdefault(t.worker_pid, []).append(t)
    return {pid: tuple(group) for pid, group in found.items()}


def _task_age(world: World, p: Proc) -> str | None:
    """`update_weights running for 25 min` from the Ray task the process runs, where known."""
    now = world.snapshot.manifest.created_at
    for t in world.memo("tasks_by_pid", lambda: _tasks_by_pid(world)).get(p.pid, ()):
        if t.state == TASK_RUNNING and t.start_time_ms and now > 0:
            age = now - t.start_time_ms / 1000.0
            if age >= 0:
                when = f"{age / 60:.0f} min" if age >= 120 else f"{age:.0f} s"
                return f"{t.name.rpartition('.')[2] or t.name} running for {when}"
    return None


def _row_state(world: World, p: Proc) -> str:
    if p.dead:
        return "dead (gone from the process table)"
    parts: list[str] = []
    missing = "stack not taken" if advice.stacks_not_asked(world.snapshot) else "no stack"
    if p.latest is not None:
        parts.append(p.latest.describe())
    elif p.member is not None and p.member.method:
        parts.append(f"running {p.member.method} ({missing})")
    else:
        parts.append(missing)
    if p.gpu is not None:
        spinning = any(k.gpu == p.gpu for k in cuda_spins(world))
        parts.append(f"GPU {p.gpu.index} {SPINNING_WORDS if spinning else p.gpu.state.words}")
    if (age := _task_age(world, p)) is not None:
        parts.append(age)
    return "; ".join(parts)


def build_rows(world: World, culprits: tuple[Merged, ...]) -> tuple[RoleRow, ...]:
    pids = {pid for c in culprits for pid in c.marked_pids()}
    rows: list[RoleRow] = []
    for p in world.procs:
        if p.role is None:
            continue
        rows.append(
            RoleRow(
                role=p.role,
                label=p.label,
                node_ip=p.node_ip,
                pid=p.pid,
                stage=_row_stage(p),
                state=_row_state(world, p),
                culprit=p.pid in pids,
                engine_url=p.engine_url,
            )
        )
    order = (Role.TRAIN_RANK, Role.SGLANG_ENGINE, Role.ROLLOUT_MANAGER, Role.ROUTER, Role.DRIVER)
    rank = {role: i for i, role in enumerate(order)}
    return tuple(sorted(rows, key=lambda r: (rank.get(r.role, 9), r.label, r.pid or 0)))


def build_excerpt(world: World, culprits: tuple[Merged, ...]) -> StackExcerpt | None:
    for m in culprits:
        c = m.culprit()
        proc = world.find(c.pid, c.node_ip)
        if proc is not None:
            proc = _most_telling(world, proc)
        if proc is not None and proc.latest is not None:
            return _excerpt(proc)
    waiting = [
        p for p in world.procs if p.latest is not None and p.latest.primary.in_collective
    ] or [p for p in world.procs if p.latest is not None and p.latest.stage is not None]
    return _excerpt(waiting[0]) if waiting else None


def _most_telling(world: World, proc: Proc) -> Proc:
    """For an engine, the process of it whose stack says most (a stuck scheduler, not an idle HTTP loop)."""
    if proc.engine_url is None:
        return proc
    kin = [p for p in world.procs if p.engine_url == proc.engine_url and p.latest is not None]

    def score(p: Proc) -> tuple[int, int, int, int]:
        read = p.latest
        assert read is not None
        return (
            int(read.primary.in_collective),
            int(read.stage is not None),
            int(p.kind is MemberKind.SCHEDULER),
            int(p is proc),
        )

    return max(kin, key=score, default=proc)


def _excerpt(p: Proc) -> StackExcerpt | None:
    read = p.latest
    if read is None:
        return None
    t = read.primary
    title = f"{p.label} (pid {p.pid}" + (f" @{p.node_ip}" if p.node_ip else "") + ")"
    title += f", thread {t.name or t.thread_id}"
    return StackExcerpt(title, tuple(f.where for f in t.frames), highlight(t))


# --------------------------------------------------------------------------- confidence & summary


def _confidence(
    status: Status,
    evidence: list[Evidence],
    culprits: tuple[Merged, ...],
    progress: Progress,
    world: World,
) -> Confidence:
    if status is Status.PROGRESSING:
        sources = {s.source for s in progress.progress}
        return "high" if len(sources) >= 2 else ("medium" if sources else "low")
    if status is not Status.HUNG:
        return "low"
    sources = {e.source for e in evidence if e.strength >= 2}
    if culprits:
        sources |= culprits[0].sources
    weak = {e.source for e in evidence}
    compared = world.two_samples or any(g.readings >= 2 for g in world.gpus)
    level: Confidence
    if len(sources) >= 3 or (len(sources) >= 2 and compared):
        level = "high"
    elif sources or len(weak) >= 2:
        level = "medium"
    else:
        level = "low"
    if not compared and level == "high" and len(sources) < 3:
        level = "medium"
    return level


def _summary(
    status: Status,
    stage: Stage,
    culprits: tuple[Merged, ...],
    progress: Progress,
    current: Stage | None,
    dead: bool = False,
    cause: Cause | None = None,
) -> str:
    if status is Status.PROGRESSING:
        what = "; ".join(s.text() for s in progress.progress[:2]) or "activity seen"
        where = f" (now in {current.label})" if current else ""
        return f"Progressing{where}: {what}"
    if status is Status.HUNG:
        where = f"in {stage.label}" if stage is not Stage.UNKNOWN else "(stage unknown)"
        if cause is not None and cause.headline and not dead:
            return f"Hung {where}: {cause.headline}"  # the cause is the answer (summary_by)
        if culprits:
            c = culprits[0].culprit()
            who = culprit_label(c)
            first_why: str = c.why.split(" | ")[0]
            if dead:  # what happened first: a process died, and the others wait for it
                return f"Hung {where}: {who} died; the others wait for it - {first_why}"
            return f"Hung {where}: {who} - {first_why}"
        return f"Hung {where}: nothing advanced, culprit not identified"
    if status is Status.UNKNOWN:
        return "Could not tell: no source that shows progress or a hang was readable"
    return str(status.value)


def _headline_cause(
    status: Status, causes: list[Cause], culprits: tuple[Merged, ...]
) -> Cause | None:
    """The first known cause that is the hang's answer (`Cause.headline`), where the job hangs
    and every culprit is one of the processes it explains (`Cause.about`)."""
    if status is not Status.HUNG:
        return None
    pids = [m.culprit().pid for m in culprits]
    return next((c for c in causes if c.headline and all(p in c.about for p in pids)), None)


def _summary_by(
    cause: Cause | None, culprits: tuple[Culprit, ...], dead: bool
) -> dict[str, object]:
    """The rule that decided the headline (`extra.summary_by`): the cause's, else the first
    culprit's first reason's (docs/verdict.md, "Provenance")."""
    if cause is not None and cause.headline and not dead and cause.finding.by:
        return {"summary_by": cause.finding.by}
    if culprits and culprits[0].by:
        return {"summary_by": culprits[0].by[0]}
    return {}


def _marked_dead(ctx: advice.Context) -> tuple[Culprit, ...]:
    """The culprits, each marked `dead` where its process has died (advice.is_dead)."""
    out = []
    for m in ctx.culprits:
        c = m.culprit()
        out.append(replace(c, dead=advice.is_dead(ctx, c, ctx.world.find(c.pid, c.node_ip))))
    return tuple(out)


def culprit_label(c: Culprit) -> str:
    """`train rank 1 (pid 3151, GPU 1)`; a process of an engine with the engine as its group:
    `scheduler (pid 2870) of sglang engine http://...`."""
    text = c.role.value.replace("_", " ")
    if c.rank is not None:
        text += f" {c.rank}"
    if c.engine_url and c.role is Role.SGLANG_ENGINE:
        text += f" {c.engine_url}"
    extra = [f"pid {c.pid}"] if c.pid is not None else []
    if c.gpu is not None:
        extra.append(f"GPU {c.gpu}")
    if c.process is not None and extra:
        return f"{c.process} ({', '.join(extra)}) of {text}"
    return text + (f" ({', '.join(extra)})" if extra else "")


# --------------------------------------------------------------------------- findings


def _culprit_findings(culprits: tuple[Merged, ...]) -> list[Finding]:
    out: list[Finding] = []
    for m in culprits:
        c = m.culprit()
        evidence: list[str] = []
        for s in m.ranked():
            evidence.append(f"[{s.source}] {s.why}")
            evidence.extend(s.evidence[:3])
        out.append(
            Finding(
                "culprit",
                Severity.CRITICAL,
                f"{culprit_label(c)} is the one the "
                f"others wait for (sources: {', '.join(sorted(m.sources))})",
                tuple(dict.fromkeys(evidence))[:10],
                by=by_of(_culprit_findings),
            )
        )
    return out


def _blame_findings(blame: Blame) -> list[Finding]:
    """What blame moved: a wait passed along held Ray edges to where it ends; a party that has
    returned left out of the blame."""
    said = (
        (
            "blame-passed",
            "The wait passes along Ray calls held over both samples: the blame goes to where "
            "they end",
            blame.passed,
        ),
        (
            "blame-returned",
            "Not blamed: a process that has returned (its Ray task ended, its worker idle) "
            "will never come; whoever waits on it is on a path it did not take",
            blame.returned,
        ),
    )
    return [
        Finding(rule, Severity.INFO, text, lines[:6], by=by_of(_blame_findings))
        for rule, text, lines in said
        if lines
    ]


def _evidence_findings(evidence: list[Evidence]) -> list[Finding]:
    by_rule: dict[str, list[Evidence]] = {}
    for e in evidence:
        by_rule.setdefault(e.rule, []).append(e)
    return [
        Finding(
            rule,
            Severity.CRITICAL if max(e.strength for e in evs) >= 2 else Severity.WARNING,
            evidence_messages().get(rule, rule),
            tuple(dict.fromkeys(e.text for e in evs))[:6],
            by=evs[0].by,  # the part whose rule gave the evidence (its first, if several did)
        )
        for rule, evs in by_rule.items()
    ]


def _progress_findings(progress: Progress) -> list[Finding]:
    return [replace(f, by=by_of(_progress_findings)) for f in _progress_made(progress)]


def _progress_made(progress: Progress) -> list[Finding]:
    out: list[Finding] = []
    if progress.progress:
        unchecked = (
            (
                "the engines' tokens counted without the request path seen (no sockets source): "
                "a hop that holds the job's requests would not show here",
            )
            if progress.path_unchecked
            else ()
        )
        out.append(
            Finding(
                "progress",
                Severity.INFO,
                "Progress between the samples",
                tuple(s.text() for s in progress.progress[:8]) + unchecked,
            )
        )
    if progress.not_counted:
        out.append(
            Finding(
                "progress-not-counted",
                Severity.WARNING,
                "Work moved that is not the job's progress: the job's requests do not reach the "
                "engines (an engine's tokens count only while they do)",
                tuple(s.text() for s in progress.not_counted[:8]),
            )
        )
    if progress.activity:
        out.append(
            Finding(
                "activity-not-progress",
                Severity.INFO,
                "Activity that does not prove progress",
                tuple(s.text() for s in progress.activity[:6]),
            )
        )
    return out


# --------------------------------------------------------------------------- main


def _select_culprits(merged: list[Merged]) -> tuple[Merged, ...]:
    if not merged:
        return ()
    top = merged[0].score
    return tuple(m for m in merged if m.score == top and m.score > 0)[:4]


def _layout(world: World) -> str | None:
    hints = Counter(
        h
        for p in world.procs
        for r in p.reads
        for t in r.threads
        for f in t.frames
        if (h := layout_hint(f)) is not None
    )
    return hints.most_common(1)[0][0] if hints else None


def _suspected(
    status: Status, confidence: Confidence, culprits: tuple[Merged, ...], progress: Progress
) -> bool:
    """Hung-looking, but it could still be slow: CPU work went on, or only a busy event loop or
    weak evidence says so."""
    if status is not Status.HUNG:
        return False
    if confidence == "low" or progress.moving:
        return True
    # a loop CPU-bound in one frame (the rollout's, a hop of its request path): slow and stuck
    # look alike over one window
    return bool(culprits) and culprits[0].sources <= holding_sources()


def _unusable(snapshot: Snapshot) -> Diagnosis:
    return Diagnosis(
        stamped(
            unknown_verdict(
                "Nothing usable was collected: no stacks, processes, GPU readings, HTTP answers "
                "or Ray state.",
                blind_spots=snapshot.blind_spots,
            ),
            snapshot,
        ),
        taken_at=evidence_time(snapshot),
    )


def _idle(snapshot: Snapshot, world: World) -> Diagnosis:
    verdict = Verdict(
        status=Status.IDLE,
        stage=Stage.NONE,
        summary="No slime job: no RUNNING Ray job and no slime actor or process found.",
        # a router may still list servers
        findings=tuple(idle_findings(world)),
        blind_spots=tuple(snapshot.blind_spots),
        window_s=snapshot.window_s,
        confidence="medium" if snapshot.joined(RAY_STATE).seen else "low",
    )
    return Diagnosis(stamped(verdict, snapshot))


@dataclass(frozen=True)
class _Decided:
    """The live verdict: who is blamed, whether the job hangs, where."""

    merged: list[Merged]
    blame: Blame
    evidence: list[Evidence]
    status: Status
    live_stage: Stage
    stage: Stage
    culprits: tuple[Merged, ...]


def _decide(world: World, reads: Reads) -> _Decided:
    suspects = find_suspects(reads)
    blame = assign(merge(suspects, world), world)
    merged = list(blame.candidates)
    evidence = hang_evidence(reads, suspects)
    status = _status(world, reads.progress, evidence, merged)
    live_stage = decide_stage(world, merged) if status is Status.HUNG else Stage.NONE
    stage = live_stage
    if status is Status.HUNG and stage is Stage.UNKNOWN:
        # a second stage signal (the logs' open Timer): only where the live evidence found none
        stage = stage_hint(world) or stage
    culprits = _select_culprits(merged) if status is Status.HUNG else ()
    return _Decided(merged, blame, evidence, status, live_stage, stage, culprits)


def _findings(d: _Decided, reading: Reading, causes: list[Cause]) -> list[Finding]:
    """Culprits, hang evidence, known causes, the parts' state, progress, then the logs."""
    findings: list[Finding] = []
    if d.status is Status.HUNG:
        findings += _culprit_findings(d.culprits)
        findings += _blame_findings(d.blame)
        findings += _evidence_findings(d.evidence)
    findings += [c.finding for c in causes]
    findings += section_findings(reading, Section.STATE)
    findings += _progress_findings(reading.progress)
    findings += section_findings(reading, Section.LOGS)
    return findings


def _steps(ctx: advice.Context, reading: Reading, causes: list[Cause]) -> tuple[NextStep, ...]:
    steps = advice.culprit_steps(ctx) if ctx.status is Status.HUNG else []
    steps += [s for c in causes for s in c.steps if isinstance(s, NextStep)]
    steps += part_steps(reading)
    steps += advice.general_steps(ctx)
    return advice.once(steps)


def _extra(
    world: World, engines: tuple[EngineRead, ...], current: Stage | None
) -> dict[str, object]:
    """What the verdict adds for machines: the layout, the stage now, each GPU's and engine's state."""
    extra: dict[str, object] = {}
    if (layout := _layout(world)) is not None:
        extra["slime_layout"] = layout
    if current is not None:
        extra["current_stage"] = current.value
    if (job := _running_job(world)) is not None:
        extra["job"] = job
    if world.gpus:
        spinning = {(k.gpu.node_ip, k.gpu.index) for k in cuda_spins(world)}
        extra["gpus"] = [
            {
                "node_ip": g.node_ip,
                "index": g.index,
                "state": "kernel_spin" if (g.node_ip, g.index) in spinning else g.state.value,
            }
            for g in world.gpus
        ]
    if engines:
        extra["engines"] = [
            {"url": e.url, "state": e.state.value}
            | ({"server_info_calls": e.server_info_calls} if e.server_info_calls else {})
            for e in engines
        ]
    return extra


def _running_job(world: World) -> dict[str, str] | None:
    """The RUNNING Ray job (the first by id, where several run): its job id and submission id,
    the ones a page names (watchdog/prom.py); None without one."""
    jobs = sorted(
        (j for j in world.snapshot.joined(RAY_STATE).jobs if j.status == JOB_RUNNING),
        key=lambda j: (j.job_id or "", j.submission_id or ""),
    )
    if not jobs:
        return None
    ids = {"job_id": jobs[0].job_id, "submission_id": jobs[0].submission_id}
    return {k: v for k, v in ids.items() if v}


def diagnose(snapshot: Snapshot, topology: Topology) -> Diagnosis:
    """The whole analysis. Pure: reads `snapshot` and `topology` only."""
    if not _usable(snapshot):
        return _unusable(snapshot)
    world = build_world(snapshot, topology)
    engines = read_engines(world)
    progress = assess(world)
    if _no_job(world):
        return _idle(snapshot, world)
    d = _decide(world, Reads(world, progress))
    reading = Reading(world, progress, d.status, d.stage, d.live_stage)
    causes = known_causes(reading)
    ctx = advice.Context(world, engines, d.status, d.stage, d.culprits)
    confidence = _confidence(d.status, d.evidence, d.culprits, progress, world)
    current = current_stage(world)
    culprits = _marked_dead(ctx)  # is_dead read once per culprit; the summary reads the first's
    top_dead = bool(culprits) and culprits[0].dead
    decided = _headline_cause(d.status, causes, d.culprits)
    verdict = Verdict(
        status=d.status,
        stage=d.stage,
        summary=_summary(d.status, d.stage, d.culprits, progress, current, top_dead, decided),
        culprits=culprits,
        findings=tuple(_findings(d, reading, causes)),
        next_steps=_steps(ctx, reading, causes),
        blind_spots=tuple(advice.blind_spots(ctx)),
        window_s=snapshot.window_s,
        confidence=confidence,
        suspected=_suspected(d.status, confidence, d.culprits, progress),
        extra=_extra(world, engines, current) | _summary_by(decided, culprits, top_dead),
    )
    waits = find_waits(world, engines, d.culprits) if d.status is Status.HUNG else ()
    rows = build_rows(world, d.culprits)
    held = blocked_for(snapshot, verdict.culprits) if d.status is Status.HUNG else None
    excerpt = build_excerpt(world, d.culprits)
    return Diagnosis(
        stamped(verdict, snapshot),
        rows,
        excerpt,
        waits,
        taken_at=evidence_time(snapshot),
        blocked_for=held,
        doubts=advice.verdict_doubts(verdict.blind_spots),
    )


def stamped(verdict: Verdict, snapshot: Snapshot) -> Verdict:
    """What a machine needs to file a verdict: when the evidence was taken (the bundle's start)
    and the Ray job it is about (the running one; else the latest). The pipeline adds the
    doctor's version and the bundle's path."""
    jobs = snapshot.joined(RAY_STATE).jobs
    job = next((j for j in jobs if j.status == JOB_RUNNING), jobs[-1] if jobs else None)
    return replace(
        verdict,
        collected_at=snapshot.manifest.created_at or None,
        job=None if job is None else JobRef(job.submission_id, job.job_id),
    )


def _confirmed(m: Merged, world: World) -> bool:
    """A blame that may call the job hung by itself: one from a source other than a single stack
    read, or stacks whose collective waiters did not move over both samples."""
    if m.sources - {STACKS}:
        return True
    return any(
        last.primary.in_collective and first.primary.key() == last.primary.key()
        for p in world.procs
        if (pair := p.two_reads) is not None
        for first, last in (pair,)
    )


def _status(
    world: World, progress: Progress, evidence: list[Evidence], merged: list[Merged]
) -> Status:
    """The one place the parts are weighed against each other: work of a decisive kind makes the
    job progressing; CPU work alone does only where no confirmed blame or strong evidence says it
    hangs; a blame or evidence makes it hung, and so does a comparison where nothing moved."""
    if progress.decisive:
        return Status.PROGRESSING
    blamed = any(m.score >= MEDIUM and _confirmed(m, world) for m in merged)
    if progress.moving and not blamed and not any(e.strength >= 2 for e in evidence):
        return Status.PROGRESSING  # CPU work in moving code, and nothing else says hung
    if evidence or blamed:
        return Status.HUNG
    if any(p.decisive for p in progress.compared):
        return Status.HUNG  # a source that shows progress was compared, and nothing moved
    if any(p.latest is not None and p.latest.cpu_busy for p in world.procs):
        return Status.PROGRESSING
    return Status.UNKNOWN
