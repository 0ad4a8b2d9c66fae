"""Suspects from the kernel-side state of the slime processes: one in uninterruptible disk sleep at
both samples with no storage byte moved in between, or asleep in a write to a pipe or socket whose
reader stopped (nothing moving in between) (analysis/kernel.py)."""

from __future__ import annotations

from slime_hangdoctor.analysis.kernel import kernel_reads
from slime_hangdoctor.analysis.suspects.suspect import MEDIUM, Suspect, SuspectInputs


def suspects(reads: SuspectInputs) -> list[Suspect]:
    """A slime process stuck in the kernel: D state at both samples and no storage byte moved, or
    a write to a pipe / socket asleep at both samples and nothing moving."""
    out: list[Suspect] = []
    for k in kernel_reads(reads.world):
        if k.proc.role is None or not (k.stuck_in_kernel or k.stuck_writing):
            continue
        read = k.proc.latest
        why = (
            f"in uninterruptible disk sleep at both samples ({k.where()}) with no storage byte "
            "moved: stuck in the kernel (storage that does not answer)"
            if k.stuck_in_kernel
            else f"blocked in a write at both samples ({k.where()}) with nothing moving: the "
            "pipe or socket it writes to is full and its reader stopped"
        )
        out.append(
            Suspect(
                source="kernel",
                role=k.proc.role,
                why=why,
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
