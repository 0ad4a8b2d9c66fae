"""Known bugs of slime and SGLang, recognised by their frames (slime.md section 5) and by the rest
of the evidence each case needs (analysis/known_case.py): each rule a predicate over the stacks of
the roles it concerns (the gate) plus its table entry, a `KnownCase` whose typed fields say what
else that case needs (the PP size, the groups' names, the engines' place in them, an odd scheduler,
the release that fixed it) and the next steps that check and fix it. Asserted only when every
piece is shown, "similar to <case>" when a piece is not shown, nothing when one contradicts it. A
known cause that needs another source's evidence lives in that source's part (the router that is
gone in parts/routers.py, the checkpoint that waits on storage in parts/kernel.py, the requests held
by a proxy or a service outside the job in parts/rollout.py)."""

from __future__ import annotations

from collections.abc import Sequence

from slime_hangdoctor.analysis.known_case import (
    FlagNeed,
    FramesNeed,
    KnownCase,
    frame_hits,
    judged,
)
from slime_hangdoctor.analysis.readers.pyspy import ThreadRead
from slime_hangdoctor.analysis.readers.sglang_http import EngineState, read_engines
from slime_hangdoctor.analysis.signatures import COLLECTIVE_BLOCKS, Block
from slime_hangdoctor.analysis.signatures import slime as frames
from slime_hangdoctor.analysis.signatures.sglang import UPDATE_FROM_TENSOR, WEIGHT_GROUP_FUNCS
from slime_hangdoctor.analysis.source_analysis import Cause, Reading, SourceAnalysis, cause
from slime_hangdoctor.analysis.world import Proc, threads_with
from slime_hangdoctor.topology import MemberKind
from slime_hangdoctor.verdict import NextStep, Role, Severity, Stage, Status

PP_SIZE = FlagNeed(
    "PP size",
    frozenset({"--pipeline-model-parallel-size", "--pipeline_model_parallel_size"}),
    at_least=2,
    from_group_numbers=True,
)
DRAFT_MODEL = FlagNeed(
    "a draft model (MTP/EAGLE)",
    frozenset({"--sglang-speculative-algorithm", "--speculative-algorithm"}),
)
CP_SIZE = FlagNeed(
    "CP size", frozenset({"--context-parallel-size", "--context_parallel_size"}), at_least=2
)

# The frames each case's rule is gated on (its function adds what their threads must wait in)
PP_SOURCES = FramesNeed(
    "train ranks creating the weight-update group under connect_rollout_engines",
    Role.TRAIN_RANK,
    frames.PP_CONNECT_FUNCS,
)
PP_ENGINES = FramesNeed(
    "engines in init_weights_update_group", Role.SGLANG_ENGINE, WEIGHT_GROUP_FUNCS
)
COLOCATED_SENDERS = FramesNeed(
    "a colocated (CUDA IPC) weight update", None, frames.COLOCATED_UPDATE_FUNCS
)
TENSOR_UPDATE_SCHEDULERS = FramesNeed(
    "an engine's scheduler in update_weights_from_tensor",
    Role.SGLANG_ENGINE,
    frozenset({UPDATE_FROM_TENSOR}),
)
SYMPY_GRADERS = FramesNeed(
    "the RolloutManager CPU-bound in sympy or slime's sympy graders",
    Role.ROLLOUT_MANAGER,
    frames.SYMPY_GRADER_FUNCS,
    frames.SYMPY_DIR,
)
ENGINE_STARTUP = FramesNeed(
    "startup waiting for the engines (_wait_server_healthy, init_rollout_engines)",
    None,
    frames.ENGINE_STARTUP_FUNCS,
)
RELOADING = FramesNeed(
    "train ranks re-creating their process groups", Role.TRAIN_RANK, frames.RELOAD_GROUP_FUNCS
)
WAKING = FramesNeed(
    "train ranks in a collective under wake_up", Role.TRAIN_RANK, frozenset({frames.WAKE_UP})
)
TRITON = FramesNeed(
    "a train rank in Triton's compiler", Role.TRAIN_RANK, file_part=frames.TRITON_DIR
)
CP_GATHER = FramesNeed(
    "train ranks in _allgather_cp_redistribute",
    Role.TRAIN_RANK,
    frozenset({frames.CP_ALLGATHER}),
)

# The table: one entry per known case, with the evidence it needs beyond its frames.
PP_GROUP_DEADLOCK = KnownCase(
    rule="known-pp-weight-group-deadlock",
    case="THUDM/slime PR#2331",
    cause=(
        "Weight-update group creation is stuck: with PP>1 every PP source creates its "
        "`slime-pp_k` group at the same time while each SGLangEngine actor serves one "
        "init_weights_update_group call at a time, so engine 0 joins one group and engine 1 "
        "another and both groups wait forever"
    ),
    frames=(PP_SOURCES, PP_ENGINES),
    flags=(PP_SIZE,),
    group_prefix="slime-pp_",
    engines_split=True,
    checks=(
        "Check which group each engine joined: its SGLang log's 'init custom process group: "
        "... group_name=...' line, or py-spy dump the engine actors and schedulers "
        "(init_weights_update_group / init_custom_process_group frames)",
    ),
    fixes=(
        "Work-around until PR #2331 lands: connect PP sources one at a time, or run the "
        "rollout sync with a single PP source",
    ),
)
CUDA_IPC_COLOCATE = KnownCase(
    rule="known-cuda-ipc-colocate-hang",
    case="sgl-project/sglang#17870",
    cause=(
        "A colocated weight update over CUDA IPC is stuck inside SGLang: with an MTP/EAGLE head "
        "the first update_weights_from_tensor hangs, most schedulers wait in the tp_cpu_group "
        "barrier and one is blocked in the CUDA-IPC storage deleter; Python-only stacks are "
        "misleading there"
    ),
    frames=(COLOCATED_SENDERS, TENSOR_UPDATE_SCHEDULERS),
    flags=(DRAFT_MODEL,),
    odd_scheduler_under=frozenset({UPDATE_FROM_TENSOR}),
)
SYMPY_REWARD = KnownCase(
    rule="known-sympy-reward-hang",
    case="slime's rule-based math graders",
    cause=(
        "The math reward is inside sympy on the rollout event loop. slime's rule-based graders "
        "call sympy.simplify with no timeout (the source notes 'sympy might hang'): one "
        "pathological answer freezes every rollout coroutine"
    ),
    frames=(SYMPY_GRADERS,),
    fixes=(
        "Run the grader with a timeout (e.g. a process pool with a deadline) or switch to a "
        "reward that bounds its time",
    ),
)
ENGINE_NEVER_HEALTHY = KnownCase(
    rule="known-engine-never-healthy",
    case="THUDM/slime#1484",
    cause=(
        "Startup waits for SGLang engines to become healthy. slime polls /health_generate every "
        "2 s with no timeout (_wait_server_healthy), so an engine that never answers (OOM, CUDA "
        "graph capture, NCCL init of a multi-node engine, a port clash) hangs the job silently; "
        "the reported case hung right after 'Capture cuda graph' / 'Uvicorn running'"
    ),
    frames=(ENGINE_STARTUP,),
    checks=(
        "Read each engine's SGLang log (the SGLangEngine actor's Ray log: "
        "`ray logs actor --id <actor id>`) for OOM / CUDA graph / NCCL errors",
        "Probe the engine without generating: curl -s -m 5 http://<engine>/model_info",
    ),
)
RELOAD_TIMEOUT = KnownCase(
    rule="known-reload-process-group-timeout",
    case="THUDM/slime PR#2208",
    cause=(
        "Train ranks are re-creating their process groups (colocate wake_up / weight sync). "
        "Before slime v0.3.1 the reloaded NCCL groups use the default 10-minute timeout and "
        "ignore --distributed-timeout-minutes: a slow rank there is killed by the NCCL watchdog "
        "after 10 min"
    ),
    frames=(RELOADING, WAKING),
    fixed_in="v0.3.1 (PR #2208)",
    checks=("Check the job's slime version (pip show slime, or the git commit of its checkout)",),
    fixes=(
        "If the job runs slime older than v0.3.1, upgrade (THUDM/slime PR #2208) or keep WORLD "
        "alive with SLIME_DESTROY_WORLD_PROCESS_GROUP=0 (v0.3.1+)",
    ),
)
TRITON_JIT = KnownCase(
    rule="known-triton-jit-slow-stage",
    case="THUDM/slime#1487, PR #2364",
    cause=(
        "A train rank is compiling Triton kernels while its pipeline peers wait: with a cold "
        "kernel cache one PP stage can take many minutes; this is slow, not hung, unless it "
        "passes the NCCL timeout"
    ),
    frames=(TRITON,),
    flags=(PP_SIZE,),
    fixes=("Warm the Triton cache (persist TRITON_CACHE_DIR across runs) and wait a few minutes",),
)
CP_ALLGATHER = KnownCase(
    rule="known-cp-allgather-stuck",
    case="THUDM/slime PR#2123",
    cause=(
        "Train ranks are in the context-parallel all-gather of the loss; a requires_grad "
        "mismatch there stalled training"
    ),
    frames=(CP_GATHER,),
    flags=(CP_SIZE,),
    fixed_in="PR #2123",
    checks=("Check that the job runs a slime with PR #2123",),
)


def _pp_group_deadlock(r: Reading) -> Cause | None:
    trainers = [
        (p, t)
        for p, t in frame_hits(r.world, PP_SOURCES)
        if t.block in (Block.RENDEZVOUS, Block.RAY_GET, Block.COLLECTIVE)
    ]
    engines = frame_hits(r.world, PP_ENGINES)
    if not trainers or (len({p.pid for p, _ in trainers}) < 2 and not engines):
        return None
    return _known(PP_GROUP_DEADLOCK, r, Severity.CRITICAL, trainers + engines)


def _sympy_reward(r: Reading) -> Cause | None:
    hits = [(p, t) for p, t in frame_hits(r.world, SYMPY_GRADERS) if t.block is Block.CPU]
    if not hits:
        return None
    return _known(
        SYMPY_REWARD, r, Severity.CRITICAL if r.status is Status.HUNG else Severity.WARNING, hits
    )


def _cuda_ipc_colocate(r: Reading) -> Cause | None:
    if r.stage not in (Stage.WEIGHT_SYNC, Stage.UNKNOWN):
        return None
    hits = frame_hits(r.world, COLOCATED_SENDERS)
    bad = [
        e for e in read_engines(r.world) if e.state in (EngineState.UNRESPONSIVE, EngineState.STUCK)
    ]
    scheds = [
        (p, t)
        for p, t in frame_hits(r.world, TENSOR_UPDATE_SCHEDULERS)
        if p.kind is MemberKind.SCHEDULER
    ]
    if not hits or not (bad or scheds):
        return None
    pids = sorted({p.pid for p, _ in scheds}) or sorted({s.pid for e in bad for s in e.schedulers})
    return _known(
        CUDA_IPC_COLOCATE,
        r,
        Severity.WARNING,
        hits + scheds,
        [f"py-spy dump --native --pid {pid}" for pid in pids[:4]]
        or ["py-spy dump --native on every sglang::scheduler process of the engine"],
    )


def _startup_never_healthy(r: Reading) -> Cause | None:
    if r.stage is not Stage.STARTUP:
        return None
    hits = frame_hits(r.world, ENGINE_STARTUP)
    if not hits:
        return None
    return _known(ENGINE_NEVER_HEALTHY, r, Severity.WARNING, hits)


def _lock_without_holder(r: Reading) -> Cause | None:
    trainers = r.world.by_role(Role.TRAIN_RANK)
    spinning = [
        (p, t)
        for p, t in threads_with(trainers, {frames.BUCKET_BROADCAST})
        if t.main
        and t.stage_sig is not None
        and t.stage_sig.func == frames.BUCKET_BROADCAST
        and t.block not in COLLECTIVE_BLOCKS
    ]
    holders = [
        (p, t)
        for p, t in threads_with(trainers, {frames.WEIGHT_BROADCAST})
        if t.stage_sig is not None and t.stage_sig.func == frames.WEIGHT_BROADCAST
    ]
    if not spinning or holders or r.status is not Status.HUNG:
        return None
    return cause(
        "weight-sync-lock-not-released",
        Severity.CRITICAL,
        "PP source ranks spin on the weight-sync Lock (Lock.acquire every 0.1 s) but no rank is "
        "broadcasting: the Lock is held by a rank that died or left the broadcast without "
        "releasing it.",
        [f"{p.label}: {t.describe()}" for p, t in spinning],
        ["Look for a PP source rank that died or raised during update_weights (ray job logs)"],
    )


def _reload_timeout(r: Reading) -> Cause | None:
    hits = frame_hits(r.world, RELOADING) or [
        (p, t) for p, t in frame_hits(r.world, WAKING) if t.in_collective
    ]
    if not hits or r.status is not Status.HUNG:
        return None
    return _known(RELOAD_TIMEOUT, r, Severity.WARNING, hits)


def _triton_jit(r: Reading) -> Cause | None:
    hits = frame_hits(r.world, TRITON)
    waiting = [
        (p, t)
        for p, t in threads_with(r.world.by_role(Role.TRAIN_RANK))
        if t.main and t.in_collective
    ]
    if not hits or not waiting:
        return None
    return _known(TRITON_JIT, r, Severity.WARNING, hits + waiting)


def _cp_allgather(r: Reading) -> Cause | None:
    hits = frame_hits(r.world, CP_GATHER)
    if not hits or r.status is not Status.HUNG:
        return None
    return _known(CP_ALLGATHER, r, Severity.WARNING, hits)


def _known(
    case: KnownCase,
    r: Reading,
    severity: Severity,
    hits: Sequence[tuple[Proc, ThreadRead]],
    checks_steps: Sequence[str | NextStep] | None = None,
) -> Cause | None:
    """The cause `case` gives on the threads its frames matched (`hits`): asserted, "similar to",
    or None where the bundle contradicts a piece of it (known_case.judged)."""
    evidence = [f"{p.label}: {t.describe()}" for p, t in hits]
    j = judged(case, r.world, severity, evidence, checks_steps)
    return None if j is None else cause(j.rule, j.severity, j.message, j.evidence, j.steps)


ANALYSIS = SourceAnalysis(
    name="known_bugs",
    causes=(
        _pp_group_deadlock,
        _sympy_reward,
        _cuda_ipc_colocate,
        _startup_never_healthy,
        _lock_without_holder,
        _reload_timeout,
        _triton_jit,
        _cp_allgather,
    ),
)
