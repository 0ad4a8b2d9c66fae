"""A GPU that spins with no communicator anywhere: a CUDA kernel or stream that never finishes.

(A CUDA kernel: "kernel" alone, in this package, is the Linux kernel of analysis/kernel.py.)

NVML cannot tell a rank whose NCCL kernel waits for a peer from a rank whose own CUDA kernel never
ends (or whose device-to-host copy never returns): both read util 100 %, memory util 0, flat NVLink,
low power (recorded on H200: shared/fixtures/gpu-h200-kernel-spin vs gpu-2xh200-nccl-broadcast-hang).
What tells them apart is whether a communicator exists at all. This module says, from typed facts
only, that none does:

- NCCL RAS was probed on the GPU's node and its port was closed (`Outcome.UNAVAILABLE`: no live
  communicator there), or RAS answered and lists no communicator;
- no flight-recorder dump (a rank with a process group would have one to give);
- no stack of any process, in any sample, is in a collective, a rendezvous, `torch.distributed`,
  or an NCCL / c10d native frame;
- no process of the job was started with `WORLD_SIZE` > 1;
- no GPU of the job is idle beside the spinning one (the pattern of a peer that never joined);
- the spinning GPU's process waits at a CUDA sync point and its stage is not one that is itself a
  collective (an NCCL broadcast's `synchronize`).

Then the process on that GPU is the culprit: a stuck CUDA kernel or stream, not a collective.
"""

from __future__ import annotations

from dataclasses import dataclass

from slime_hangdoctor.analysis.readers.nvml import GpuRead, GpuState
from slime_hangdoctor.analysis.signatures import Block
from slime_hangdoctor.analysis.signatures.megatron import PARALLEL_STATE_PY
from slime_hangdoctor.analysis.signatures.torch import COMM_NATIVE_PARTS, DISTRIBUTED_DIR
from slime_hangdoctor.analysis.source import Source
from slime_hangdoctor.analysis.world import Proc, World
from slime_hangdoctor.facts import Frame
from slime_hangdoctor.outcome import Outcome
from slime_hangdoctor.parsers.flight_recorder import SPEC as FLIGHT_RECORDER
from slime_hangdoctor.parsers.nccl_ras import SPEC as RAS
from slime_hangdoctor.verdict import Role, Stage

# a GPU spinning with no communicator anywhere: the name parts/gpu_kernel blames in and the advice
# gives its steps for (analysis/advice.py)
GPU_KERNEL = Source("gpu_kernel")

_COMM_BLOCKS = frozenset({Block.COLLECTIVE, Block.RENDEZVOUS})
_COMM_NATIVE = COMM_NATIVE_PARTS
_COMM_FILES = (DISTRIBUTED_DIR, PARALLEL_STATE_PY)
# stages whose CUDA sync waits on a collective the stage itself issued
_COLLECTIVE_STAGES = frozenset({Stage.NCCL_BROADCAST})
_JOB_ROLES = frozenset({Role.TRAIN_RANK, Role.SGLANG_ENGINE})


@dataclass(frozen=True)
class CudaSpin:
    """One GPU that spins with no communicator: its process waits at a CUDA sync forever."""

    gpu: GpuRead
    proc: Proc
    why_no_communicator: tuple[str, ...]

    @property
    def sync_frame(self) -> Frame | None:
        read = self.proc.latest
        return read.primary.block_frame if read is not None else None


def _comm_frame(f: Frame) -> bool:
    if f.native:
        name = f.name.lower()
        return any(w in name for w in _COMM_NATIVE)
    path = f.filename.replace("\\", "/")
    return any(part in path for part in _COMM_FILES)


def _communicator_in_stacks(world: World) -> str | None:
    for p in world.procs:
        for read in p.reads:
            for t in read.threads:
                if t.block in _COMM_BLOCKS:
                    return f"{p.label} (pid {p.pid}) is {t.describe()}"
                hit = next((f for f in t.own if _comm_frame(f)), None)
                if hit is not None:
                    return f"{p.label} (pid {p.pid}) has {hit.where} on its stack"
    return None


def _world_size_env(world: World) -> str | None:
    for p in world.procs:
        for _, info in p.infos:
            raw = info.env.get("WORLD_SIZE")
            if raw is not None and raw.strip().isdigit() and int(raw) > 1:
                return f"pid {p.pid} was started with WORLD_SIZE={raw.strip()}"
    return None


def _ras_closed(world: World, node_ip: str | None) -> str | None:
    """Why RAS says there is no communicator on `node_ip`, or None when it cannot say so."""
    if any(obs.fact.communicators for obs in world.snapshot.facts(RAS)):
        return None
    on_node = [
        r
        for r in world.snapshot.manifest.probes
        if r.source == RAS.name and (node_ip is None or r.node_ip in (None, node_ip))
    ]
    if not on_node:
        return None
    if all(r.outcome is Outcome.UNAVAILABLE for r in on_node):
        return f"NCCL RAS on {on_node[0].target}: port closed in every sample (no communicator)"
    answered = [obs for obs in world.snapshot.facts(RAS) if obs.node_ip in (None, node_ip)]
    if answered and not any(obs.fact.communicators for obs in answered):
        return "NCCL RAS answered and lists no communicator"
    return None


def _job_gpus(world: World) -> list[GpuRead]:
    out: list[GpuRead] = []
    for g in world.gpus:
        procs = [world.find(pid, g.node_ip) for pid, _ in g.pids]
        if any(p is not None and p.role in _JOB_ROLES for p in procs):
            out.append(g)
    return out


def _holder(world: World, g: GpuRead) -> Proc | None:
    for pid, _ in g.pids:
        p = world.find(pid, g.node_ip)
        if p is not None and p.latest is not None:
            return p
    return None


def cuda_spins(world: World) -> tuple[CudaSpin, ...]:
    """GPUs that spin while no communicator exists anywhere, each with the process waiting on it."""
    stuck = [g for g in world.gpus if g.state is GpuState.STUCK]
    if not stuck or world.snapshot.facts(FLIGHT_RECORDER):
        return ()
    if _communicator_in_stacks(world) is not None or _world_size_env(world) is not None:
        return ()
    if any(g.state is GpuState.IDLE for g in _job_gpus(world)):
        return ()  # a peer that never joined: the collective pattern, not a CUDA kernel
    out: list[CudaSpin] = []
    for g in stuck:
        proc = _holder(world, g)
        read = proc.latest if proc is not None else None
        if proc is None or read is None or read.block is not Block.CUDA_SYNC:
            continue
        if read.stage in _COLLECTIVE_STAGES:
            continue
        ras = _ras_closed(world, g.node_ip)
        if ras is None:
            continue
        why = (
            ras,
            "no stack of any process shows a process group, a collective or an NCCL frame"
            + (" (native stacks included)" if read.native else ""),
            "no flight-recorder dump",
        )
        out.append(CudaSpin(g, proc, why))
    return tuple(out)
