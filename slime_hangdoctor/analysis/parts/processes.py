"""The process table: slime processes seen in an earlier sample and gone (or zombie) in the last
are suspects; CPU time spent between the samples is activity, or work where the call chain moved."""

from __future__ import annotations

from slime_hangdoctor.analysis.readers.gone_routers import gone_routers
from slime_hangdoctor.analysis.readers.proof import (
    CPU_BUSY_FRACTION,
    Moved,
    Proof,
    Signal,
    window_s,
)
from slime_hangdoctor.analysis.readers.sglang_http import EngineState, read_engines
from slime_hangdoctor.analysis.signatures import Block
from slime_hangdoctor.analysis.source_analysis import (
    STRONG,
    Reads,
    SourceAnalysis,
    Suspect,
    suspect,
)
from slime_hangdoctor.analysis.world import CPU, PROCESSES, Proc, World
from slime_hangdoctor.parsers.processes import STATUS_GONE
from slime_hangdoctor.verdict import Stage


def suspects(reads: Reads) -> list[Suspect]:
    dead_engines = {e.url for e in read_engines(reads.world) if e.state is EngineState.DEAD}
    # a dead engine, or a router that is gone: their own finders say what is known of them
    told = dead_engines | {g.url for g in gone_routers(reads.world)}
    return _dead_processes(reads, told)


def _death(p: Proc) -> str:
    """How `p` is seen dead: gone from the process table, or a zombie (exited, not reaped), and
    whether an earlier sample saw it alive."""
    if p.gone or not p.infos:
        return f"{p.label} (pid {p.pid}) is gone from the process table: it died during the window"
    when = (
        "it died during the window"
        if any(info.status not in STATUS_GONE for _sample, info in p.infos)
        else "it had died before the first sample"
    )
    parent = f" (pid {p.parent_pid})" if p.parent_pid else ""
    return f"{p.label} (pid {p.pid}) is a zombie: it exited and its parent{parent} has not reaped it; {when}"


def _dead_processes(reads: Reads, dead_engines: set[str]) -> list[Suspect]:
    """Slime processes seen in an earlier /proc sample and gone (or zombie) in the last one."""
    return [
        suspect(
            PROCESSES,
            p.role,
            _death(p),
            p,
            weight=STRONG,
        )
        for p in reads.world.procs
        if p.role is not None and p.dead and (p.engine_url or "") not in dead_engines
    ]


def progress(world: World) -> Moved:
    """CPU time of each slime process between the samples: work where it computes in a call chain
    that moved, activity otherwise (a spin at a CUDA sync burns a core too)."""
    window = window_s(world)
    moved: list[Signal] = []
    activity: list[Signal] = []
    for p in world.procs:
        delta = p.cpu_delta
        if delta is None or window <= 0 or delta < CPU_BUSY_FRACTION * window:
            continue
        msg = f"{delta:.1f} CPU-seconds in {window:.0f} s"
        first, last = p.first, p.latest
        computing = (
            last is not None
            and last.primary.block is Block.CPU
            and last.stage is not Stage.REWARD
            and first is not None
            and first.sample != last.sample
            and first.primary.calls() != last.primary.calls()
        )
        if computing and last is not None:
            moved.append(Signal(CPU, p.label, f"computing ({msg}), call chain moving", p.pid))
        else:
            spin = last is not None and last.primary.block is Block.CUDA_SYNC
            activity.append(
                Signal(CPU, p.label, msg + (" spinning at a CUDA sync" if spin else ""))
            )
    compared = any(p.cpu_delta is not None for p in world.procs)
    return Moved(Proof.CPU, tuple(moved), tuple(activity), compared=compared)


ANALYSIS = SourceAnalysis(
    name="processes",
    gives=(PROCESSES, CPU),
    progress=progress,
    suspects=suspects,
)
