"""Known bugs of slime and SGLang, recognised by their frames (slime.md section 5): each a predicate
over the stacks of the roles it concerns plus the text that links it; reported only when the frames
match, never by default. A known cause that needs another source's evidence lives in that source's
part (the router that is gone in parts/routers.py, the checkpoint that waits on storage in
parts/kernel.py, the requests held by a proxy or a service outside the job in parts/rollout.py)."""

from __future__ import annotations

from slime_hangdoctor.analysis.readers.sglang_http import EngineState, read_engines
from slime_hangdoctor.analysis.signatures import COLLECTIVE_BLOCKS, Block
from slime_hangdoctor.analysis.signatures import slime as frames
from slime_hangdoctor.analysis.signatures.sglang import UPDATE_FROM_TENSOR, WEIGHT_GROUP_FUNCS
from slime_hangdoctor.analysis.source_analysis import Cause, Reading, SourceAnalysis, cause
from slime_hangdoctor.analysis.world import threads_with
from slime_hangdoctor.topology import MemberKind
from slime_hangdoctor.verdict import Role, Severity, Stage, Status


def _pp_group_deadlock(r: Reading) -> Cause | None:
    trainers = [
        (p, t)
        for p, t in threads_with(
            r.world.by_role(Role.TRAIN_RANK),
            frames.PP_CONNECT_FUNCS,
        )
        if t.block in (Block.RENDEZVOUS, Block.RAY_GET, Block.COLLECTIVE)
    ]
    engines = threads_with(
        r.world.by_role(Role.SGLANG_ENGINE),
        WEIGHT_GROUP_FUNCS,
    )
    if not trainers or (len({p.pid for p, _ in trainers}) < 2 and not engines):
        return None
    return cause(
        "known-pp-weight-group-deadlock",
        Severity.CRITICAL,
        "Weight-update group creation is stuck: with PP>1 every PP source creates its "
        "`slime-pp_k` group at the same time while each SGLangEngine actor serves one "
        "init_weights_update_group call at a time, so engine 0 joins one group and engine 1 "
        "another and both groups wait forever (THUDM/slime PR #2331).",
        [f"{p.label}: {t.describe()}" for p, t in trainers + engines],
        [
            "Check which group each engine joined: py-spy dump the engine actors and schedulers "
            "(init_weights_update_group / init_custom_process_group frames)",
            "Work-around until PR #2331 lands: connect PP sources one at a time, or run the "
            "rollout sync with a single PP source",
        ],
    )


def _sympy_reward(r: Reading) -> Cause | None:
    hits = threads_with(r.world.by_role(Role.ROLLOUT_MANAGER), file_part=frames.SYMPY_DIR) + [
        (p, t)
        for p, t in threads_with(r.world.by_role(Role.ROLLOUT_MANAGER), frames.SYMPY_GRADER_FUNCS)
    ]
    hits = [(p, t) for p, t in hits if t.block is Block.CPU]
    if not hits:
        return None
    return cause(
        "known-sympy-reward-hang",
        Severity.CRITICAL if r.status is Status.HUNG else Severity.WARNING,
        "The math reward is inside sympy on the rollout event loop. slime's rule-based graders "
        "call sympy.simplify with no timeout (the source notes 'sympy might hang'): one "
        "pathological answer freezes every rollout coroutine.",
        [f"{p.label}: {t.describe()}" for p, t in hits],
        [
            "Run the grader with a timeout (e.g. a process pool with a deadline) or switch to a "
            "reward that bounds its time",
        ],
    )


def _cuda_ipc_colocate(r: Reading) -> Cause | None:
    if r.stage not in (Stage.WEIGHT_SYNC, Stage.UNKNOWN):
        return None
    hits = threads_with(
        r.world.procs,
        frames.COLOCATED_UPDATE_FUNCS,
    )
    bad = [
        e for e in read_engines(r.world) if e.state in (EngineState.UNRESPONSIVE, EngineState.STUCK)
    ]
    scheds = [
        (p, t)
        for p, t in threads_with(r.world.by_role(Role.SGLANG_ENGINE), {UPDATE_FROM_TENSOR})
        if p.kind is MemberKind.SCHEDULER
    ]
    if not hits or not (bad or scheds):
        return None
    pids = sorted({p.pid for p, _ in scheds}) or sorted({s.pid for e in bad for s in e.schedulers})
    return cause(
        "known-cuda-ipc-colocate-hang",
        Severity.WARNING,
        "A colocated weight update over CUDA IPC is stuck inside SGLang. Known case "
        "(sgl-project/sglang#17870): with an MTP/EAGLE head the first update_weights_from_tensor "
        "hangs, most schedulers wait in the tp_cpu_group barrier and one is blocked in the "
        "CUDA-IPC storage deleter; Python-only stacks are misleading there.",
        [f"{p.label}: {t.describe()}" for p, t in (hits + scheds)],
        [f"py-spy dump --native --pid {pid}" for pid in pids[:4]]
        or ["py-spy dump --native on every sglang::scheduler process of the engine"],
    )


def _startup_never_healthy(r: Reading) -> Cause | None:
    if r.stage is not Stage.STARTUP:
        return None
    hits = threads_with(
        r.world.procs,
        frames.ENGINE_STARTUP_FUNCS,
    )
    if not hits:
        return None
    return cause(
        "known-engine-never-healthy",
        Severity.WARNING,
        "Startup waits for SGLang engines to become healthy. slime polls /health_generate every "
        "2 s with no timeout (_wait_server_healthy), so an engine that never answers (OOM, CUDA "
        "graph capture, NCCL init of a multi-node engine, a port clash) hangs the job silently "
        "(THUDM/slime#1484: hang right after 'Capture cuda graph' / 'Uvicorn running').",
        [f"{p.label}: {t.describe()}" for p, t in hits],
        [
            "Read each engine's SGLang log (the SGLangEngine actor's Ray log: "
            "`ray logs actor --id <actor id>`) for OOM / CUDA graph / NCCL errors",
            "Probe the engine without generating: curl -s -m 5 http://<engine>/model_info",
        ],
    )


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
    hits = threads_with(r.world.by_role(Role.TRAIN_RANK), frames.RELOAD_GROUP_FUNCS) or [
        (p, t)
        for p, t in threads_with(r.world.by_role(Role.TRAIN_RANK), {frames.WAKE_UP})
        if t.in_collective
    ]
    if not hits or r.status is not Status.HUNG:
        return None
    return cause(
        "known-reload-process-group-timeout",
        Severity.WARNING,
        "Train ranks are re-creating their process groups (colocate wake_up / weight sync). "
        "Before slime v0.3.1 (#2208) the reloaded NCCL groups use the default 10-minute timeout "
        "and ignore --distributed-timeout-minutes: a slow rank there is killed by the NCCL "
        "watchdog after 10 min.",
        [f"{p.label}: {t.describe()}" for p, t in hits],
        [
            "If the job runs slime older than v0.3.1, upgrade (THUDM/slime PR #2208) or keep WORLD "
            "alive with SLIME_DESTROY_WORLD_PROCESS_GROUP=0 (v0.3.1+)",
        ],
    )


def _triton_jit(r: Reading) -> Cause | None:
    hits = threads_with(r.world.by_role(Role.TRAIN_RANK), file_part=frames.TRITON_DIR)
    waiting = [
        (p, t)
        for p, t in threads_with(r.world.by_role(Role.TRAIN_RANK))
        if t.main and t.in_collective
    ]
    if not hits or not waiting:
        return None
    return cause(
        "known-triton-jit-slow-stage",
        Severity.WARNING,
        "A train rank is compiling Triton kernels while its pipeline peers wait (THUDM/slime#1487, "
        "PR #2364): with a cold kernel cache one PP stage can take many minutes; this is slow, "
        "not hung, unless it passes the NCCL timeout.",
        [f"{p.label}: {t.describe()}" for p, t in hits + waiting],
        ["Warm the Triton cache (persist TRITON_CACHE_DIR across runs) and wait a few minutes"],
    )


def _cp_allgather(r: Reading) -> Cause | None:
    hits = threads_with(r.world.by_role(Role.TRAIN_RANK), {frames.CP_ALLGATHER})
    if not hits or r.status is not Status.HUNG:
        return None
    return cause(
        "known-cp-allgather-stuck",
        Severity.WARNING,
        "Train ranks are in the context-parallel all-gather of the loss; a requires_grad mismatch "
        "there stalled training (THUDM/slime PR #2123).",
        [f"{p.label}: {t.describe()}" for p, t in hits],
        ["Check that the job runs a slime with PR #2123"],
    )


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
