"""Known causes (slime.md §5), concrete next steps and blind spots.

Each known cause is a small predicate over the evidence plus the text that links it; a cause is only
reported when the evidence matches, never by default.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from slime_hangdoctor.analysis.cuda_spin import CudaSpin, cuda_spins
from slime_hangdoctor.analysis.engines import EngineRead, EngineState
from slime_hangdoctor.analysis.kernel import kernel_reads
from slime_hangdoctor.analysis.lost_requests import Holder, LostRequests, where_requests_are
from slime_hangdoctor.analysis.signatures import COLLECTIVE_BLOCKS, Block, split_name
from slime_hangdoctor.analysis.stacks import ThreadRead
from slime_hangdoctor.analysis.suspects.merge import Merged
from slime_hangdoctor.analysis.suspects.routers import gone_routers
from slime_hangdoctor.analysis.world import Proc, World
from slime_hangdoctor.facts import JOB_RUNNING, Frame
from slime_hangdoctor.http_facts import RouterWorkers
from slime_hangdoctor.parsers.flight_recorder import SPEC as FLIGHT_RECORDER
from slime_hangdoctor.parsers.nccl_ras import SPEC as RAS
from slime_hangdoctor.snapshot import Snapshot
from slime_hangdoctor.sources import SPECS
from slime_hangdoctor.verdict import Finding, Role, Severity, Stage, Status


@dataclass(frozen=True)
class Context:
    world: World
    engines: tuple[EngineRead, ...]
    status: Status
    stage: Stage
    culprits: tuple[Merged, ...]


@dataclass(frozen=True)
class Cause:
    finding: Finding
    steps: tuple[str, ...] = ()


# --------------------------------------------------------------------------- helpers


def _threads(procs: tuple[Proc, ...]) -> Iterator[tuple[Proc, ThreadRead]]:
    for p in procs:
        if p.latest is not None:
            for t in p.latest.threads:
                yield p, t


def _funcs(t: ThreadRead) -> set[str]:
    return {split_name(f.name)[1] for f in t.own}


def _in_file(frame: Frame, part: str) -> bool:
    return part in frame.filename.replace("\\", "/") or part in (frame.short_filename or "")


def _with_frames(
    procs: tuple[Proc, ...], funcs: set[str] | None = None, file_part: str | None = None
) -> list[tuple[Proc, ThreadRead]]:
    out: list[tuple[Proc, ThreadRead]] = []
    for p, t in _threads(procs):
        if funcs is not None and not (funcs & _funcs(t)):
            continue
        if file_part is not None and not any(_in_file(f, file_part) for f in t.own):
            continue
        out.append((p, t))
    return out


def _who(hits: list[tuple[Proc, ThreadRead]]) -> str:
    return ", ".join(dict.fromkeys(f"{p.label} (pid {p.pid})" for p, _ in hits[:4]))


def _cause(rule: str, sev: Severity, msg: str, ev: list[str], steps: list[str]) -> Cause:
    return Cause(Finding(rule, sev, msg, tuple(ev[:6])), tuple(steps))


# --------------------------------------------------------------------------- known causes


def _reload_timeout(ctx: Context) -> Cause | None:
    hits = _with_frames(
        ctx.world.by_role(Role.TRAIN_RANK), {"reload_process_groups", "destroy_process_groups"}
    ) or [
        (p, t)
        for p, t in _with_frames(ctx.world.by_role(Role.TRAIN_RANK), {"wake_up"})
        if t.in_collective
    ]
    if not hits or ctx.status is not Status.HUNG:
        return None
    return _cause(
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


def _pp_group_deadlock(ctx: Context) -> Cause | None:
    trainers = [
        (p, t)
        for p, t in _with_frames(
            ctx.world.by_role(Role.TRAIN_RANK),
            {"connect_rollout_engines_from_distributed", "connect_rollout_engines"},
        )
        if t.block in (Block.RENDEZVOUS, Block.RAY_GET, Block.COLLECTIVE)
    ]
    engines = _with_frames(
        ctx.world.by_role(Role.SGLANG_ENGINE),
        {"init_weights_update_group", "init_custom_process_group"},
    )
    if not trainers or (len({p.pid for p, _ in trainers}) < 2 and not engines):
        return None
    return _cause(
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


def _sympy_reward(ctx: Context) -> Cause | None:
    hits = _with_frames(ctx.world.by_role(Role.ROLLOUT_MANAGER), file_part="sympy/") + [
        (p, t)
        for p, t in _with_frames(
            ctx.world.by_role(Role.ROLLOUT_MANAGER), {"are_equal_under_sympy", "grade_answer_verl"}
        )
    ]
    hits = [(p, t) for p, t in hits if t.block is Block.CPU]
    if not hits:
        return None
    return _cause(
        "known-sympy-reward-hang",
        Severity.CRITICAL if ctx.status is Status.HUNG else Severity.WARNING,
        "The math reward is inside sympy on the rollout event loop. slime's rule-based graders "
        "call sympy.simplify with no timeout (the source notes 'sympy might hang'): one "
        "pathological answer freezes every rollout coroutine.",
        [f"{p.label}: {t.describe()}" for p, t in hits],
        [
            "Run the grader with a timeout (e.g. a process pool with a deadline) or switch to a "
            "reward that bounds its time",
        ],
    )


def _cuda_ipc_colocate(ctx: Context) -> Cause | None:
    if ctx.stage not in (Stage.WEIGHT_SYNC, Stage.UNKNOWN):
        return None
    hits = _with_frames(
        ctx.world.procs,
        {"_send_to_colocated_engine", "update_weights_from_tensor", "_send_hf_params"},
    )
    bad = [e for e in ctx.engines if e.state in (EngineState.UNRESPONSIVE, EngineState.STUCK)]
    scheds = [
        (p, t)
        for p, t in _with_frames(
            ctx.world.by_role(Role.SGLANG_ENGINE), {"update_weights_from_tensor"}
        )
        if p.kind == "scheduler"
    ]
    if not hits or not (bad or scheds):
        return None
    pids = sorted({p.pid for p, _ in scheds}) or sorted({s.pid for e in bad for s in e.schedulers})
    return _cause(
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


def _startup_never_healthy(ctx: Context) -> Cause | None:
    if ctx.stage is not Stage.STARTUP:
        return None
    hits = _with_frames(
        ctx.world.procs,
        {"_wait_server_healthy", "init_rollout_engines", "start_rollout_servers", "start_engines"},
    )
    if not hits:
        return None
    return _cause(
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


def _triton_jit(ctx: Context) -> Cause | None:
    hits = _with_frames(ctx.world.by_role(Role.TRAIN_RANK), file_part="triton/")
    waiting = [
        (p, t)
        for p, t in _with_frames(ctx.world.by_role(Role.TRAIN_RANK))
        if t.main and t.in_collective
    ]
    if not hits or not waiting:
        return None
    return _cause(
        "known-triton-jit-slow-stage",
        Severity.WARNING,
        "A train rank is compiling Triton kernels while its pipeline peers wait (THUDM/slime#1487, "
        "PR #2364): with a cold kernel cache one PP stage can take many minutes; this is slow, "
        "not hung, unless it passes the NCCL timeout.",
        [f"{p.label}: {t.describe()}" for p, t in hits + waiting],
        ["Warm the Triton cache (persist TRITON_CACHE_DIR across runs) and wait a few minutes"],
    )


def _cp_allgather(ctx: Context) -> Cause | None:
    hits = _with_frames(ctx.world.by_role(Role.TRAIN_RANK), {"_allgather_cp_redistribute"})
    if not hits or ctx.status is not Status.HUNG:
        return None
    return _cause(
        "known-cp-allgather-stuck",
        Severity.WARNING,
        "Train ranks are in the context-parallel all-gather of the loss; a requires_grad mismatch "
        "there stalled training (THUDM/slime PR #2123).",
        [f"{p.label}: {t.describe()}" for p, t in hits],
        ["Check that the job runs a slime with PR #2123"],
    )


def _lock_without_holder(ctx: Context) -> Cause | None:
    trainers = ctx.world.by_role(Role.TRAIN_RANK)
    spinning = [
        (p, t)
        for p, t in _with_frames(trainers, {"_update_bucket_weights_from_distributed"})
        if t.main
        and t.stage_sig is not None
        and t.stage_sig.func == "_update_bucket_weights_from_distributed"
        and t.block not in COLLECTIVE_BLOCKS
    ]
    holders = [
        (p, t)
        for p, t in _with_frames(trainers, {"update_weights_from_distributed"})
        if t.stage_sig is not None and t.stage_sig.func == "update_weights_from_distributed"
    ]
    if not spinning or holders or ctx.status is not Status.HUNG:
        return None
    return _cause(
        "weight-sync-lock-not-released",
        Severity.CRITICAL,
        "PP source ranks spin on the weight-sync Lock (Lock.acquire every 0.1 s) but no rank is "
        "broadcasting: the Lock is held by a rank that died or left the broadcast without "
        "releasing it.",
        [f"{p.label}: {t.describe()}" for p, t in spinning],
        ["Look for a PP source rank that died or raised during update_weights (ray job logs)"],
    )


def _health_noise(ctx: Context) -> Cause | None:
    if ctx.status is not Status.HUNG:
        return None
    ok = [
        o.answer
        for o in ctx.world.snapshot.http
        if o.answer.path in ("/health", "/metrics") and o.answer.status == 200
    ]
    if not ok:
        return None
    return _cause(
        "health-is-not-progress",
        Severity.INFO,
        "Engines answer /health or /metrics with 200: those answers come from the HTTP process "
        "and do not show progress (THUDM/slime#1058: endless 'GET /health 200' while hung).",
        [f"GET {a.url}{a.path}: 200" for a in ok[:3]],
        [],
    )


def _router_no_workers(ctx: Context) -> Cause | None:
    """A router whose `/workers` lists no worker in every sample that read it: sgl-router 0.3.2
    then answers every `/generate` 503 `no_available_workers` (and `/readiness` 503): recorded
    from the real wheel with no worker, tests/fixtures/real/router-no-workers/answers.json. The
    doctor never sends a `/generate` itself: the empty list is what it reads."""
    lists: dict[str, list[tuple[int, RouterWorkers]]] = {}
    for o in ctx.world.snapshot.http:
        if o.kind == "router" and isinstance(o.parsed, RouterWorkers):
            lists.setdefault(o.answer.url.rstrip("/"), []).append((o.sample, o.parsed))
    empty = sorted(url for url, seen in lists.items() if seen and not any(w.urls for _, w in seen))
    if not empty:
        return None
    return _cause(
        "router-no-workers",
        Severity.WARNING,
        "The router lists no worker: every /generate sent through it is answered 503 "
        "no_available_workers and never reaches an engine (THUDM/slime#1026, #683, #1391: a dead "
        "or OOM engine, a proxy on the master, a wrong host IP - set SLIME_HOST_IP; or engines "
        "that never registered).",
        [f"GET {url}/workers: 200, no worker, in every sample" for url in empty[:3]],
        [
            f"curl -s -m 5 {empty[0]}/workers  and check that every engine URL is reachable "
            "from the router's node"
        ],
    )


def _router_gone(ctx: Context) -> Cause | None:
    """The job's router is gone (`routers.gone_router`): what killed it, and that nothing
    restarts it."""
    gone = gone_routers(ctx.world)
    if not gone:
        return None
    first = gone[0]
    blamed = first.blamed
    node = blamed.node_ip if blamed is not None else None
    steps = [
        f"dmesg -T | grep -iE 'killed process|out of memory'{f'  on {node}' if node else ''}  "
        "(the OOM killer names the process it killed: "
        + (f"pid {first.proc.pid}" if first.proc is not None else "the router's pid")
        + ")",
    ]
    if first.owner is not None and first.owner.actor_id:
        steps.append(
            f"ray logs actor --id {first.owner.actor_id}  (slime forks its router from the "
            "RolloutManager: the router's own output, a panic or its last lines, is in that "
            "actor's log)"
        )
    steps.append(
        "restart the job: slime starts its router only in the RolloutManager's constructor "
        "(`_start_router`) and nothing starts it again; give the router more memory or run it "
        "yourself (--sglang-router-ip/--sglang-router-port) if it was OOM-killed"
    )
    ev = [
        f"{g.url}: named {g.known.origin}; "
        + ", ".join(f"GET {a.path}: {a.error or 'no answer'}" for a in g.answers[:2])
        for g in gone
    ]
    return _cause(
        "router-gone",
        Severity.WARNING,
        "The job's router is gone: its port refuses connections and no process of the job "
        "listens there, while the rollout sends its requests to it (slime retries "
        "/generate on a refused connection; engines stay idle). sgl-router is a plain child "
        "process of the RolloutManager: killed (the OOM killer, a signal) or crashed, it is "
        "never restarted.",
        ev,
        steps,
    )


def _idle_rollout_held_by(
    ctx: Context, holder: Holder
) -> tuple[LostRequests, list[EngineRead]] | None:
    """The first RolloutManager whose rollout loop waits on I/O while every engine that reports
    its load holds no request and does not move, when `holder` holds its requests
    (`lost_requests.where_requests_are`), with those engines."""
    for rm in ctx.world.by_role(Role.ROLLOUT_MANAGER):
        read = rm.latest
        if read is None or read.loop is None or read.loop.block is not Block.EVENT_LOOP:
            continue
        known = [e for e in ctx.engines if e.in_flight is not None]
        if not known or any((e.in_flight or 0) > 0 or e.moving for e in known):
            return None
        where = where_requests_are(ctx.world, ctx.engines, rm)
        if where.holder is holder:
            return where, known
    return None


def _requests_at_proxy(ctx: Context) -> Cause | None:
    """The rollout waits on I/O, no engine has a request, and the RolloutManager's requests go to
    an HTTP proxy (slime#1026 maintainer: "a proxy on the master node"): the proxy holds them.
    Its own cause, beside the hazard: what to check and what to change."""
    if ctx.status is not Status.HUNG or ctx.stage not in (Stage.ROLLOUT_DISPATCH, Stage.EVAL):
        return None
    found = _idle_rollout_held_by(ctx, Holder.PROXY)
    if found is None:
        return None
    where, known = found
    url = known[0].url
    return _cause(
        "requests-at-proxy",
        Severity.CRITICAL,
        f"The rollout's requests go to an HTTP proxy ({where.proxy}), not to the engines: "
        "every engine answers and holds no request while the RolloutManager waits on the "
        "proxy (THUDM/slime#1026: a proxy on the master node)",
        [
            *where.why,
            *(f"[sglang] engine {e.url}: 0 running, 0 queued" for e in known[:3]),
        ],
        [
            f"On the RolloutManager's node: `curl -s -m 5 {url}/health` (through the proxy, "
            f"as the rollout's client does) against `curl -s -m 5 --noproxy '*' {url}/health`"
            " (direct): the first hangs or fails where the proxy cannot reach the engines",
            "slime's httpx client (trust_env) and the router honour http_proxy/https_proxy/"
            "all_proxy and no_proxy: no_proxy takes host names, exact IPs and .domain "
            "suffixes, not CIDR ranges; list every engine and router host",
        ],
    )


def _requests_at_external_service(ctx: Context) -> Cause | None:
    """The rollout waits on a service outside the job that the job's configuration names (a remote
    reward model or judge, a tool server, an external engine): it holds the requests."""
    if ctx.status is not Status.HUNG:
        return None
    found = _idle_rollout_held_by(ctx, Holder.EXTERNAL)
    svc = found[0].service if found is not None else None
    if found is None or svc is None:
        return None
    where = found[0]
    return _cause(
        "requests-at-external-service",
        Severity.CRITICAL,
        f"The rollout waits on the {svc.kind.value} {svc.url}, a service outside the job "
        f"({svc.named_by}): the RolloutManager holds its requests there while every engine "
        "is idle",
        list(where.why),
        [
            f"From the RolloutManager's node: `curl -s -m 10 -o /dev/null -w '%{{http_code}} "
            f"%{{time_total}}s\\n' {svc.url}` (a hang or a 5xx is the service's own problem)",
            f"Look at the {svc.kind.value}'s own logs, load and GPU: it accepted the "
            "connections and has not answered",
            "slime's remote_rm waits as long as its aiohttp session lets it (January 2026: "
            "aiohttp's default 300 s per request; August 2026: 120 s, retried 10 times): "
            "give a custom reward or tool client a timeout so that a wedged service fails a "
            "step instead of stopping the job",
        ],
    )


def _disk_sleep(p: Proc) -> bool:
    """The process's last /proc reading says D (uninterruptible disk sleep), or the kernel source
    saw it or one of its threads in D at the last sample."""
    if p.kernel and p.kernel[-1][1].in_disk_sleep:
        return True
    return bool(p.infos) and p.infos[-1][1].status == "disk-sleep"


def _checkpoint(ctx: Context) -> Cause | None:
    """A hang in checkpoint save / load: storage (ranks writing, in D state) versus a collective
    mismatch (ranks in a collective of the save, others elsewhere or all in it: slime#1908,
    verl#2238). Its next steps differ from a train-step hang's."""
    if ctx.status is not Status.HUNG or ctx.stage is not Stage.CHECKPOINT:
        return None
    ranks = [p for p in ctx.world.train_ranks() if p.latest is not None]
    saving = [p for p in ranks if p.latest is not None and p.latest.stage is Stage.CHECKPOINT]
    in_coll = [p for p in saving if p.latest is not None and p.latest.primary.in_collective]
    elsewhere = [p for p in ranks if p not in saving]
    storage = [p for p in ranks if _disk_sleep(p)] or [p for p in saving if p not in in_coll]
    ev = [f"{p.label}: {p.latest.describe()}" for p in saving + elsewhere if p.latest is not None]
    reads = {k.proc.pid: k for k in kernel_reads(ctx.world) if k.proc in ranks}
    ev += [
        f"{p.label} (pid {p.pid}): D state (uninterruptible disk I/O)"
        for p in ranks
        if _disk_sleep(p) and p.pid not in reads
    ]
    ev += [k.describe() for k in reads.values() if k.last.in_disk_sleep or k.io_delta]
    pids = " ".join(str(p.pid) for p in (storage or saving or ranks)[:4])
    storage_steps = [
        f"for p in {pids or 'PID'}; do cat /proc/$p/wchan; echo; grep State /proc/$p/status; "
        "grep -E 'write_bytes|read_bytes' /proc/$p/io; done  (twice, a minute apart: bytes "
        "that move are slow storage, flat bytes in D state are stuck storage)",
        "Check the file system under --save (df -h, mount, NFS/Lustre/object-store client health) "
        "and whether another job writes there",
    ]
    stuck = [k for k in reads.values() if k.stuck_in_kernel or k.stuck_writing]
    if stuck:
        msg = (
            "Checkpoint save / load is stuck in storage, not in a collective: "
            + "; ".join(f"{k.proc.label} (pid {k.proc.pid}) {k.where()}" for k in stuck[:3])
            + " at both samples, nothing written between them: stuck storage"
            + (f"; {len(in_coll)} rank(s) wait for it in the save's collective" if in_coll else "")
            + "."
        )
        steps = [
            *storage_steps,
            "A write blocked in pipe_write / sk_stream_wait_memory goes to a pipe or socket: find "
            "its reader (ls -l /proc/PID/fd; the uploader or compressor the save streams to) and "
            "why it stopped reading",
        ]
    elif in_coll and (elsewhere or storage):
        msg = (
            f"Checkpoint collective mismatch: {len(in_coll)} rank(s) wait in a collective of the "
            f"save ({_who([(p, p.latest.primary) for p in in_coll if p.latest])}) while "
            f"{len(elsewhere) + len([p for p in storage if p not in in_coll])} rank(s) are "
            "elsewhere or still writing: every rank must enter the same save with the same plan."
        )
        steps = [
            "Compare the stacks of the ranks in the save with the odd ones: a rank that skipped "
            "save_model, saves a different state dict, or is still finalising an earlier async "
            "save (maybe_finalize_async_save) leaves the others in the save's gather/all_reduce",
            *storage_steps[:1],
        ]
    elif in_coll:
        msg = (
            f"All {len(in_coll)} rank(s) in the checkpoint wait in a collective of the save "
            "(as in slime#1908: gather_object in save_state_dict_async_plan; verl#2238: all_reduce "
            "in a MoE dist_checkpointing save): a collective mismatch between ranks, or a rank "
            "not seen here that never entered the save."
        )
        steps = [
            "Check that every train rank (and the critic, if any) called save_model for this "
            "rollout: a missing rank or a different parallel layout (EP/TP groups) leaves the "
            "rest in the save's collective; try the next run with --async-save off to tell the "
            "async plan from the save itself",
            "A large MoE save can take tens of minutes (verl#2238): compare against an earlier "
            "save's `Timer save_model end (elapsed: ...)` log line before calling it stuck",
        ]
    else:
        msg = (
            "Checkpoint save / load is in file I/O, not in a collective: the storage under "
            "--save / --load is slow or stuck"
            + (" (D state: uninterruptible disk I/O)" if any(_disk_sleep(p) for p in ranks) else "")
            + "."
        )
        if any(k.io_delta for k in reads.values()):
            msg += " Storage bytes moved between the samples: slow storage, not stuck."
        steps = storage_steps
    return _cause("checkpoint-stall", Severity.WARNING, msg, ev, steps)


KNOWN_CAUSES: tuple[Callable[[Context], Cause | None], ...] = (
    _pp_group_deadlock,
    _sympy_reward,
    _cuda_ipc_colocate,
    _startup_never_healthy,
    _lock_without_holder,
    _reload_timeout,
    _triton_jit,
    _cp_allgather,
    _router_no_workers,
    _router_gone,
    _requests_at_proxy,
    _requests_at_external_service,
    _health_noise,
    _checkpoint,
)


def known_causes(ctx: Context) -> list[Cause]:
    return [c for c in (rule(ctx) for rule in KNOWN_CAUSES) if c is not None]


# --------------------------------------------------------------------------- next steps

_NCCL_STAGES = frozenset({Stage.TRAIN, Stage.NCCL_BROADCAST, Stage.WEIGHT_SYNC, Stage.CHECKPOINT})


def _on(p: Proc | None, node: str | None = None) -> str:
    ip = (p.node_ip if p else None) or node
    return f" (on {ip})" if ip else ""


def culprit_steps(ctx: Context) -> list[str]:
    steps: list[str] = []
    gone = {g.url for g in gone_routers(ctx.world)}
    for m in ctx.culprits:
        c = m.culprit()
        proc = ctx.world.find(c.pid, c.node_ip)
        if c.role is Role.SGLANG_ENGINE:
            engine = next((e for e in ctx.engines if e.url == c.engine_url), None)
            scheds = engine.schedulers if engine else ()
            for s in scheds[:4]:
                steps.append(f"py-spy dump --native --pid {s.pid}{_on(s)}  (SGLang scheduler)")
            if not scheds and c.pid is not None:
                steps.append(f"py-spy dump --native --pid {c.pid}{_on(proc, c.node_ip)}")
            if c.engine_url:
                steps.append(
                    f"curl -s -m 5 {c.engine_url}/server_info  (internal_states == [] means the "
                    "scheduler is stuck); never call /flush_cache or /pause_generation to test it"
                )
            if c.actor_id:
                steps.append(f"ray logs actor --id {c.actor_id}  (the engine's SGLang log)")
        elif c.role is Role.ROLLOUT_MANAGER and c.pid is not None:
            steps.append(
                f"py-spy dump --locals --pid {c.pid}{_on(proc, c.node_ip)}  (the loop thread's "
                "locals show what it works on, e.g. the answer being graded)"
            )
            steps.append(
                f"python3.14 -m asyncio pstree {c.pid}  (rollout coroutines; Python >= 3.14) or "
                "an asyncio.all_tasks() dump: py-spy does not show suspended coroutines"
            )
        if "gpu_kernel" in m.sources:
            steps += _cuda_spin_steps(ctx, c.pid, c.node_ip)
        elif c.role is Role.TRAIN_RANK and c.pid is not None:
            steps.append(
                f"py-spy dump --native --pid {c.pid}{_on(proc, c.node_ip)}  (train rank"
                + (f" {c.rank}" if c.rank is not None else "")
                + ": native frames show the CUDA / NCCL call under the Python frame)"
            )
            if c.actor_id:
                steps.append(f"ray logs actor --id {c.actor_id}")
        elif c.role is Role.ROUTER and c.engine_url in gone:
            continue  # nothing of it to dump: `router-gone` says where to look
        elif c.pid is not None:
            steps.append(f"py-spy dump --pid {c.pid}{_on(proc, c.node_ip)}")
            if c.actor_id:
                steps.append(f"ray logs actor --id {c.actor_id}")
    return steps


def _cuda_spin_steps(ctx: Context, pid: int | None, node_ip: str | None) -> list[str]:
    spin: CudaSpin | None = next((k for k in cuda_spins(ctx.world) if k.proc.pid == pid), None)
    if spin is None:
        return []
    on = _on(spin.proc, node_ip)
    steps = []
    if not (spin.proc.latest is not None and spin.proc.latest.native):
        steps.append(
            f"py-spy dump --native --pid {pid}{on}  (the CUDA call under the Python sync: "
            "cudaDeviceSynchronize / cudaStreamSynchronize / a device-to-host copy)"
        )
    return steps + [
        f"cuda-gdb -p {pid}{on}, then `info cuda kernels`  (which kernel is resident on "
        f"{spin.gpu.label} and where it spins)",
        "Re-run the step under compute-sanitizer (--tool memcheck / racecheck / synccheck) or "
        "with CUDA_LAUNCH_BLOCKING=1 to name the kernel that never finishes (a spin-wait on a "
        "flag nobody sets, an out-of-bounds loop, a deadlocked custom kernel)",
        "If the process exchanges CUDA IPC handles (colocated weight update, "
        "torch.multiprocessing tensors): check that the producer is still alive and did not "
        "free or reuse the memory, and that the consumer's storage deleter is not waiting in "
        "cudaStreamSynchronize (sglang PR#17870); a device-to-host copy that never returns "
        "points at the kernel before it (vime PR#168)",
    ]


def _collective_hang(ctx: Context) -> bool:
    """Some process waits in a collective / at a CUDA sync, or a GPU busy-waits in one."""
    w = ctx.world
    if any(p.latest is not None and p.latest.primary.in_collective for p in w.procs):
        return True
    return bool(w.snapshot.facts(RAS) or w.snapshot.facts(FLIGHT_RECORDER)) or any(
        g.state.value == "stuck_in_collective" for g in w.gpus
    )


def general_steps(ctx: Context) -> list[str]:
    w = ctx.world
    steps: list[str] = []
    if (
        ctx.status is Status.HUNG
        and ctx.stage in _NCCL_STAGES
        and _collective_hang(ctx)
        and not cuda_spins(w)
    ):
        if not w.snapshot.facts(FLIGHT_RECORDER):
            steps.append(
                "Arm the PyTorch flight recorder for the next run (before the process groups are "
                "created): TORCH_FR_BUFFER_SIZE=2000 TORCH_FR_DUMP_TEMP_FILE=/tmp/fr_rank_ "
                "TORCH_NCCL_DEBUG_INFO_PIPE_FILE=/tmp/fr_pipe_ ; then re-run hangdoctor with "
                "--flight-recorder to dump it on demand"
            )
        if not w.snapshot.facts(RAS):
            steps.append(
                "Ask NCCL RAS on a node of the job (NCCL >= 2.24): "
                "echo 'verbose status' | nc 127.0.0.1 28028"
            )
        steps.append(
            "For the next run: NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL and "
            "TORCH_NCCL_ENABLE_TIMING=1; the NCCL watchdog aborts after "
            "--distributed-timeout-minutes (default 10)"
        )
    if not w.snapshot.stacks and w.procs and not stacks_not_asked(w.snapshot):
        steps.append(
            "Get Python stacks: run hangdoctor as root (py-spy needs ptrace) or start Ray with "
            "RAY_DASHBOARD_ENABLE_PROFILING=1 so the dashboard serves /worker/traceback"
        )
    jobs = [j for j in w.snapshot.jobs if j.status == JOB_RUNNING]
    if jobs and ctx.status is Status.HUNG:
        j = jobs[0]
        steps.append(f"ray job logs {j.submission_id or j.job_id}  (the driver's last lines)")
    return steps


# --------------------------------------------------------------------------- blind spots


def stacks_not_asked(snapshot: Snapshot) -> bool:
    """The run was told to take no stacks (a watchdog look while work moves): none is missing."""
    return snapshot.manifest.options.get("stacks") is False


def blind_spots(ctx: Context) -> list[str]:
    w = ctx.world
    snap = w.snapshot
    out = list(snap.blind_spots)
    if not snap.stacks and stacks_not_asked(snap):
        out.append(
            "no Python stacks: not taken in this run (the watchdog takes none while work moves): "
            "stages come from Ray method names and process titles only"
        )
    elif not snap.stacks:
        out.append(
            "no Python stacks (py-spy / dashboard traceback): stages come from Ray method names "
            "and process titles only"
        )
    else:
        missing = [p for p in w.procs if p.role is not None and not p.reads]
        if missing:
            out.append(
                f"no stack for {len(missing)} slime process(es): "
                + ", ".join(f"{p.label} (pid {p.pid})" for p in missing[:5])
            )
        if any(
            p.latest and p.latest.block in COLLECTIVE_BLOCKS and not p.latest.native
            for p in w.procs
        ):
            out.append(
                "stacks are Python-only: the NCCL / CUDA call under a sync point is not visible "
                "(py-spy --native shows it)"
            )
    if not snap.gpus:
        out.append("no NVML readings: GPU states (stuck in a collective / idle / busy) unknown")
    # a source the run holds no fact of, that says what is missing then (SourceSpec.missing)
    out.extend(spec.missing for spec in SPECS if spec.missing and not snap.facts(spec))
    if not snap.ray_seen:
        out.append("no Ray state API answer: roles come from process titles and environment only")
    if not w.two_samples:
        out.append("one sample only: progress between two samples could not be measured")
    if (w.topology.engines or w.by_role(Role.SGLANG_ENGINE)) and not any(
        o.kind == "engine" for o in snap.http
    ):
        out.append("no SGLang HTTP answers: engine health and token counters unknown")
    return list(dict.fromkeys(out))
