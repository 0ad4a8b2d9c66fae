"""NVML: the idle GPU among GPUs that busy-wait in a collective (util ~100 %, memory util ~0, no
data moved) is the one whose process is not taking part; a busy GPU of the job is work."""

from __future__ import annotations

from collections.abc import Sequence

from slime_hangdoctor.analysis.readers.cuda_spin import cuda_spins
from slime_hangdoctor.analysis.readers.fr_groups import fr_groups, fr_stage
from slime_hangdoctor.analysis.readers.nvml import NVML, GpuRead, GpuState
from slime_hangdoctor.analysis.readers.proof import Moved, Proof, Signal
from slime_hangdoctor.analysis.readers.pyspy import ProcessRead
from slime_hangdoctor.analysis.signatures import COLLECTIVE_BLOCKS, Block
from slime_hangdoctor.analysis.source_analysis import (
    MEDIUM,
    Evidence,
    Reads,
    SourceAnalysis,
    Suspect,
    suspect,
)
from slime_hangdoctor.analysis.world import Proc, World
from slime_hangdoctor.verdict import Role, Stage

MESSAGES = {
    "gpu-stuck-in-collective": "GPUs busy-wait in a collective (util ~100%, memory util ~0, no data moved)",
    "gpu-kernel-spin": "A GPU spins in a kernel or stream that never finishes, with no NCCL communicator anywhere (util ~100%, memory util ~0, no data moved): not a collective",
}


def _waits_on_others(read: ProcessRead | None) -> bool:
    """The process waits for peers or another actor: a victim rather than the missing party."""
    if read is None:
        return False
    return read.block in COLLECTIVE_BLOCKS or read.block in (Block.RAY_GET, Block.HTTP)


def suspects(reads: Reads) -> list[Suspect]:
    return gpu_suspects(reads.world, _engine_stage(reads.world))


def _engine_stage(world: World) -> bool:
    """The job is in a weight sync (engines' GPUs take part in the collective too)."""
    return any(
        p.latest is not None and p.latest.stage in (Stage.NCCL_BROADCAST, Stage.WEIGHT_SYNC)
        for p in world.procs
    ) or any(
        g.behind and fr_stage(g.stuck) in (Stage.NCCL_BROADCAST, Stage.WEIGHT_SYNC)
        for g in fr_groups(world)
    )


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
        if proc is not None and world.returned(proc) is not None:
            continue  # it has returned: not "not taking part", it will never come
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
            suspect(
                NVML,
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


def evidence(reads: Reads, suspects: Sequence[Suspect]) -> list[Evidence]:
    world = reads.world
    spinning = {(k.gpu.node_ip, k.gpu.index) for k in cuda_spins(world)}
    return [
        Evidence(
            NVML,
            "gpu-kernel-spin" if (g.node_ip, g.index) in spinning else "gpu-stuck-in-collective",
            g.evidence(),
            2 if g.readings >= 2 else 1,
        )
        for g in world.gpus
        if g.state is GpuState.STUCK
    ]


def progress(world: World) -> Moved:
    """Busy GPUs that run the job's processes (all busy GPUs when no pid maps to the job). Those
    whose every process is an engine's decode for the job's requests: they count as its tokens do,
    only while the job's requests reach the engines (`Moved.served`, progress.combine)."""
    job = {p.pid for p in world.procs if p.role is not None}
    engine = {p.pid for p in world.procs if p.role is Role.SGLANG_ENGINE}
    mapped = [g for g in world.gpus if any(pid in job for pid, _ in g.pids)]
    pool = mapped if mapped else [g for g in world.gpus if not job or not g.pids]
    busy = [g for g in pool if g.state is GpuState.BUSY]
    decoding = [g for g in busy if g.pids and all(pid in engine for pid, _ in g.pids)]
    return Moved(
        Proof.DEVICE,
        tuple(Signal(NVML, g.label, g.brief()) for g in busy if g not in decoding),
        compared=any(g.readings >= 2 for g in world.gpus),
        served=tuple(Signal(NVML, g.label, g.brief()) for g in decoding),
    )


ANALYSIS = SourceAnalysis(
    name="gpu",
    gives=(NVML,),
    progress=progress,
    suspects=suspects,
    evidence=evidence,
    messages=MESSAGES,
)
