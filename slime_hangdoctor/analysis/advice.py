"""What to do next and what was not seen: the next steps for each culprit and for the hang as a
whole, and the blind spots of the run.

The known causes, which link a hang to a known bug or cause and carry their own steps, live in the
parts whose evidence they need (analysis/parts/: `SourceAnalysis.causes`).
"""

from __future__ import annotations

from dataclasses import dataclass

from slime_hangdoctor.analysis.cuda_spin import CudaSpin, cuda_spins
from slime_hangdoctor.analysis.engines import EngineRead
from slime_hangdoctor.analysis.gpu import GpuState
from slime_hangdoctor.analysis.merge import Merged
from slime_hangdoctor.analysis.parts.gpu_kernel import GPU_KERNEL
from slime_hangdoctor.analysis.parts.routers import gone_routers
from slime_hangdoctor.analysis.signatures import COLLECTIVE_BLOCKS
from slime_hangdoctor.analysis.world import Proc, World
from slime_hangdoctor.parsers.flight_recorder import SPEC as FLIGHT_RECORDER
from slime_hangdoctor.parsers.nccl_ras import SPEC as RAS
from slime_hangdoctor.parsers.nvml import GPU_SERIES
from slime_hangdoctor.parsers.pyspy import ALL_STACKS
from slime_hangdoctor.parsers.ray_state import JOB_RUNNING, RAY_STATE
from slime_hangdoctor.parsers.sglang import HTTP_ANSWERS, HttpPeer
from slime_hangdoctor.snapshot import Snapshot
from slime_hangdoctor.sources import SPECS
from slime_hangdoctor.verdict import Role, Stage, Status


@dataclass(frozen=True)
class Context:
    world: World
    engines: tuple[EngineRead, ...]
    status: Status
    stage: Stage
    culprits: tuple[Merged, ...]


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
        if GPU_KERNEL in m.sources:
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
        g.state is GpuState.STUCK for g in w.gpus
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
    if not w.snapshot.joined(ALL_STACKS) and w.procs and not stacks_not_asked(w.snapshot):
        steps.append(
            "Get Python stacks: run hangdoctor as root (py-spy needs ptrace) or start Ray with "
            "RAY_DASHBOARD_ENABLE_PROFILING=1 so the dashboard serves /worker/traceback"
        )
    jobs = [j for j in w.snapshot.joined(RAY_STATE).jobs if j.status == JOB_RUNNING]
    if jobs and ctx.status is Status.HUNG:
        j = jobs[0]
        steps.append(f"ray job logs {j.submission_id or j.job_id}  (the driver's last lines)")
    return steps


def stacks_not_asked(snapshot: Snapshot) -> bool:
    """The run was told to take no stacks (a watchdog look while work moves): none is missing."""
    return snapshot.manifest.options.get("stacks") is False


# The blind spots that could change the verdict itself (hung or not, the stage, the culprit): the
# evidence it rests on was not seen. `--brief` shows these only (`verdict_doubts`); the others
# (Python-only stacks, no RAS, no flight recorder, a probe's own failure) refine a culprit.
NO_STACKS_TAKEN = (
    "no Python stacks: not taken in this run (the watchdog takes none while work moves): "
    "stages come from Ray method names and process titles only"
)
NO_STACKS = (
    "no Python stacks (py-spy / dashboard traceback): stages come from Ray method names "
    "and process titles only"
)
NO_GPU_READINGS = "no NVML readings: GPU states (stuck in a collective / idle / busy) unknown"
NO_RAY_STATE = "no Ray state API answer: roles come from process titles and environment only"
ONE_SAMPLE = "one sample only: progress between two samples could not be measured"
NO_ENGINE_ANSWERS = "no SGLang HTTP answers: engine health and token counters unknown"
VERDICT_DOUBTS = frozenset(
    {NO_STACKS_TAKEN, NO_STACKS, NO_GPU_READINGS, NO_RAY_STATE, ONE_SAMPLE, NO_ENGINE_ANSWERS}
)


def verdict_doubts(spots: tuple[str, ...]) -> tuple[str, ...]:
    """Of a verdict's blind spots, those that could change it (VERDICT_DOUBTS), in their order."""
    return tuple(spot for spot in spots if spot in VERDICT_DOUBTS)


def blind_spots(ctx: Context) -> list[str]:
    w = ctx.world
    snap = w.snapshot
    out = list(snap.blind_spots)
    if not snap.joined(ALL_STACKS) and stacks_not_asked(snap):
        out.append(NO_STACKS_TAKEN)
    elif not snap.joined(ALL_STACKS):
        out.append(NO_STACKS)
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
    if not snap.joined(GPU_SERIES):
        out.append(NO_GPU_READINGS)
    # a source the run holds no fact of, that says what is missing then (SourceSpec.missing)
    out.extend(spec.missing for spec in SPECS if spec.missing and not snap.facts(spec))
    if not snap.joined(RAY_STATE).seen:
        out.append(NO_RAY_STATE)
    if not w.two_samples:
        out.append(ONE_SAMPLE)
    if (w.topology.engines or w.by_role(Role.SGLANG_ENGINE)) and not any(
        o.kind is HttpPeer.ENGINE for o in snap.joined(HTTP_ANSWERS)
    ):
        out.append(NO_ENGINE_ANSWERS)
    return list(dict.fromkeys(out))
