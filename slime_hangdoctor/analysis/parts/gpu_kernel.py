"""A GPU spinning with no communicator anywhere (analysis/readers/cuda_spin.py, which names its source: the advice reads it too): the process that waits at
a CUDA sync on it runs a kernel or stream that never finishes. Not a collective: nobody else waits."""

from __future__ import annotations

from slime_hangdoctor.analysis.readers.cuda_spin import GPU_KERNEL, cuda_spins
from slime_hangdoctor.analysis.source_analysis import (
    MEDIUM,
    Reads,
    SourceAnalysis,
    Suspect,
    suspect,
)
from slime_hangdoctor.verdict import Role


def suspects(reads: Reads) -> list[Suspect]:
    out: list[Suspect] = []
    for k in cuda_spins(reads.world):
        read = k.proc.latest
        sync = k.sync_frame
        out.append(
            suspect(
                GPU_KERNEL,
                k.proc.role or Role.TRAIN_RANK,
                f"{k.gpu.label} spins (util ~100%, memory util ~0, no data moved) while "
                f"{k.proc.label} waits at a CUDA sync"
                + (f" ({sync.where})" if sync is not None else "")
                + " and no NCCL communicator exists: a kernel or stream of this process never "
                "finishes",
                k.proc,
                gpu=k.gpu.index,
                node_ip=k.gpu.node_ip or k.proc.node_ip,
                weight=MEDIUM,
                stage=read.stage if read is not None else None,
                evidence=(k.gpu.evidence(), *k.why_no_communicator),
            )
        )
    return out


ANALYSIS = SourceAnalysis(name="gpu_kernel", gives=(GPU_KERNEL,), suspects=suspects)
