"""Did anything advance between the two samples? Per source, real progress vs mere activity.

Real progress: token / request counters of an engine rose, a GPU did real work (memory traffic,
NVLink bytes, tensor activity), NCCL RAS collective counts rose, a weight version moved, a process
moved to another stage, or a process computed in changing code. Activity that is NOT progress: CPU
burnt at a CUDA sync point (a stuck NCCL wait spins a core), health checks and metrics answers
(#1058: endless `GET /health 200` while hung), a stack that changed line inside the same wait.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum

from slime_hangdoctor.analysis.source import Source
from slime_hangdoctor.analysis.world import World

CPU_BUSY_FRACTION = 0.3  # of one core over the window


class Proof(IntEnum):
    """What a signal of work is: the kinds, strongest first (the order the signals are reported
    in). Each part's `progress` says which kind it reads."""

    WORK = 1  # an engine's work counters or weight version rose
    DEVICE = 2  # a GPU did real work (memory traffic, NVLink bytes, tensor activity)
    COLLECTIVES = 3  # NCCL collectives were launched
    STAGE = 4  # a process moved to another stage
    CPU = 5  # a process computed in changing code: alone, never proof against a blame
    STORAGE = 6  # bytes went to or from storage

    @property
    def decisive(self) -> bool:
        """Work of this kind makes a job progressing whatever else says it hangs."""
        return self is not Proof.CPU


@dataclass(frozen=True)
class Signal:
    source: Source
    subject: str
    message: str

    def text(self) -> str:
        return f"{self.subject}: {self.message}"


@dataclass(frozen=True)
class Moved:
    """What one part saw between the two samples."""

    proof: Proof
    progress: tuple[Signal, ...] = ()
    activity: tuple[Signal, ...] = ()
    frozen: tuple[Signal, ...] = ()  # compared across samples (or over the GPU series), unchanged
    compared: bool = False  # it had two samples (or a series) to compare


@dataclass(frozen=True)
class Progress:
    progress: tuple[Signal, ...]
    activity: tuple[Signal, ...]
    frozen: tuple[Signal, ...]
    compared: tuple[Proof, ...]  # the kinds of work that had two samples to compare
    proven: tuple[Proof, ...] = ()  # the kind of each signal of `progress`, in its order

    @property
    def moving(self) -> bool:
        return bool(self.progress)

    @property
    def decisive(self) -> bool:
        """Some work moved that makes the job progressing whatever else says it hangs."""
        return any(p.decisive for p in self.proven)


def combine(parts: Iterable[Moved]) -> Progress:
    """The parts' readings, strongest kind of proof first (Proof; ties in the parts' order)."""
    ordered = sorted(parts, key=lambda m: m.proof)
    return Progress(
        progress=tuple(s for m in ordered for s in m.progress),
        activity=tuple(s for m in ordered for s in m.activity),
        frozen=tuple(s for m in ordered for s in m.frozen),
        compared=tuple(dict.fromkeys(m.proof for m in ordered if m.compared)),
        proven=tuple(m.proof for m in ordered for _ in m.progress),
    )


def window_s(world: World) -> float:
    w = world.snapshot.window_s
    times = world.snapshot.manifest.sample_times
    if w <= 0 and len(times) >= 2:
        w = max(times) - min(times)
    return w
