"""Suspects from the kernel-side state of the slime processes: one in uninterruptible disk sleep at
both samples with no storage byte moved in between (analysis/kernel.py)."""

from __future__ import annotations

from slime_hangdoctor.analysis.kernel import kernel_reads
from slime_hangdoctor.analysis.suspects.suspect import MEDIUM, Reads, Suspect


def suspects(reads: Reads) -> list[Suspect]:
    """A slime process stuck in the kernel: D state at both samples, no storage byte moved."""
    out: list[Suspect] = []
    for k in kernel_reads(reads.world):
        if k.proc.role is None or not k.stuck_in_kernel:
            continue
        read = k.proc.latest
        out.append(
            Suspect(
                source="kernel",
                role=k.proc.role,
                why=(
                    f"in uninterruptible disk sleep at both samples ({k.where()}) with no "
                    "storage byte moved: stuck in the kernel (storage that does not answer)"
                ),
                evidence=(k.describe(),),
                weight=MEDIUM,
                pid=k.proc.pid,
                node_ip=k.proc.node_ip,
                rank=k.proc.rank,
                engine_url=k.proc.engine_url,
                actor_id=k.proc.actor_id,
                stage=read.stage if read is not None else None,
            )
        )
    return out
