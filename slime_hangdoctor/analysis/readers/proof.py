"""Did the job advance between the two samples? Every part's signals of work, and the one rule that
says which of them are the job's progress (`combine`; docs/verdict.md, "Progress is the job's").

Progress is the job's: a weight version moved, storage bytes moved by a process that waits on I/O
(parts/kernel.py: slow, not stuck), NCCL RAS collective counts rose, a GPU did real work, a process
moved to another stage, a process computed in changing code (weak). An engine's token and request
counters, and the GPU work of its processes (a part's `Moved.served`), count only while the job's
requests reach the engines: when a hop of the request path holds them (analysis/parts/request_path/hops.py:
CPU-bound in the same frame at both samples while requests pile up at it), what the engines still
decode is not the job's progress; those signals are kept as `Progress.not_counted`, with why, and
the hop is the culprit (parts/request_path.py). Activity that is NOT progress: CPU burnt at a CUDA
sync point (a stuck NCCL wait spins a core), health checks and metrics answers (#1058: endless
`GET /health 200` while hung), a stack that changed line inside the same wait.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum

from slime_hangdoctor.analysis.readers.hold import Hold, hold_text
from slime_hangdoctor.analysis.source import Source
from slime_hangdoctor.analysis.world import World

CPU_BUSY_FRACTION = 0.3  # of one core over the window


class Proof(IntEnum):
    """What a signal of work is: the kinds, strongest first (the order the signals are reported
    in). Each part's `progress` says which kind it reads."""

    WORK = 1  # an engine's work counters (while the job's requests reach it) or weight version rose
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
    pid: int | None = None  # the one process whose own work it is (None: an engine's, a node's)

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
    # work of the engines (their tokens, their processes' GPUs): progress of this part's kind only
    # while the job's requests reach them (`combine`)
    served: tuple[Signal, ...] = ()
    # hops of the request path that hold the job's requests (parts/request_path.py)
    held: tuple[Hold, ...] = ()
    # the request path was not seen (no sockets): a hold could not show
    path_unseen: bool = False


@dataclass(frozen=True)
class Progress:
    progress: tuple[Signal, ...]
    activity: tuple[Signal, ...]
    frozen: tuple[Signal, ...]
    compared: tuple[Proof, ...]  # the kinds of work that had two samples to compare
    proven: tuple[Proof, ...] = ()  # the kind of each signal of `progress`, in its order
    # work that moved but is not the job's progress (the engines' while a hop of the request path
    # holds the job's requests), each with why; and those hops
    not_counted: tuple[Signal, ...] = ()
    held: tuple[Hold, ...] = ()
    # the engines' work counted without the request path seen (no sockets): the report says so
    path_unchecked: bool = False

    @property
    def moving(self) -> bool:
        return bool(self.progress)

    @property
    def decisive(self) -> bool:
        """Some work moved that makes the job progressing whatever else says it hangs."""
        return any(p.decisive for p in self.proven)


def combine(parts: Iterable[Moved]) -> Progress:
    """The parts' readings, strongest kind of proof first (Proof; ties in the parts' order), and the
    rule of the job's progress: the engines' work (`Moved.served`) counts only while no hop of the
    request path holds the job's requests; otherwise it is `not_counted`, with why."""
    ordered = sorted(parts, key=lambda m: m.proof)
    held = tuple(h for m in ordered for h in m.held)
    holders = {h.proc.pid for h in held}
    # with a hold, the engines' work (`served`) and the holding hop's own work (its CPU in a call
    # chain that moves, such as the handler that renders and then writes the body it holds) do
    # not count
    counted = [
        (m.proof, s)
        for m in ordered
        for s in (m.progress if held else (*m.served, *m.progress))
        if s.pid not in holders
    ]
    why = f"not the job's progress: {hold_text(held[0])}" if held else ""
    served = [s for m in ordered for s in m.served] + [
        s for m in ordered for s in m.progress if s.pid in holders
    ]
    return Progress(
        progress=tuple(s for _, s in counted),
        activity=tuple(s for m in ordered for s in m.activity),
        frozen=tuple(s for m in ordered for s in m.frozen),
        compared=tuple(dict.fromkeys(m.proof for m in ordered if m.compared)),
        proven=tuple(p for p, _ in counted),
        not_counted=tuple(Signal(s.source, s.subject, f"{s.message}; {why}") for s in served)
        if held
        else (),
        held=held,
        path_unchecked=bool(served) and not held and any(m.path_unseen for m in ordered),
    )


def window_s(world: World) -> float:
    w = world.snapshot.window_s
    times = world.snapshot.manifest.sample_times
    if w <= 0 and len(times) >= 2:
        w = max(times) - min(times)
    return w
