"""Per-process reading of py-spy stacks: the stage a process is in and what it is blocked on.

The stage comes from the innermost frame that matches a stage signature (not the top frame: a stuck
NCCL collective shows at the next CUDA sync point, so the caller decides). What the thread is blocked
on comes from the innermost recognisable wait primitive (collective, CUDA sync, ray.get, HTTP, ...).
"""

from __future__ import annotations

from dataclasses import dataclass

from slime_hangdoctor.analysis.signatures import (
    COLLECTIVE_BLOCKS,
    WAITING_BLOCKS,
    Block,
    FrameSig,
    is_comm_layer,
    is_intake_caller,
    is_intake_via,
    is_transparent,
    match_frame,
    split_name,
    wait_of,
)
from slime_hangdoctor.analysis.signatures.python import FORK_ENTRY
from slime_hangdoctor.analysis.signatures.sglang import PULL_RAW_REQS
from slime_hangdoctor.analysis.signatures.slime import LOOP_THREAD_FUNCS
from slime_hangdoctor.analysis.source import Source
from slime_hangdoctor.facts import Frame
from slime_hangdoctor.parsers.pyspy import ProcessStack, StackObs, StackVia, ThreadStack
from slime_hangdoctor.verdict import Stage

STACKS = Source("stacks")  # py-spy / Ray traceback stacks

_LIBRARY_MARKS = ("site-packages/", "dist-packages/", "/lib/python3")
_SCAN_LIMIT = 12  # python frames to look through for a wait primitive under library code


@dataclass(frozen=True)
class ThreadRead:
    """One thread: its stage, what it waits on, and which frames decided both."""

    thread_id: int
    name: str | None
    active: bool
    main: bool
    frames: tuple[Frame, ...]
    stage: Stage | None
    stage_index: int | None
    stage_sig: FrameSig | None
    block: Block
    block_index: int | None

    @property
    def stage_frame(self) -> Frame | None:
        return self.frames[self.stage_index] if self.stage_index is not None else None

    @property
    def block_frame(self) -> Frame | None:
        return self.frames[self.block_index] if self.block_index is not None else None

    @property
    def own(self) -> tuple[Frame, ...]:
        """The frames the process runs itself (a forked child's inherited frames cut off)."""
        return own_frames(self.frames)

    @property
    def top(self) -> Frame | None:
        """The innermost Python frame that is not plumbing."""
        for f in self.frames:
            if not f.native and not is_transparent(f):
                return f
        return self.frames[0] if self.frames else None

    @property
    def is_loop_thread(self) -> bool:
        """An asyncio loop thread (slime's AsyncLoopThread: `_start_loop` -> `run_forever`)."""
        return any(split_name(f.name)[1] in LOOP_THREAD_FUNCS for f in self.own)

    @property
    def waiting(self) -> bool:
        return self.block in WAITING_BLOCKS

    @property
    def in_collective(self) -> bool:
        return self.block in COLLECTIVE_BLOCKS

    @property
    def in_intake(self) -> bool:
        """An SGLang TP rank waiting in `broadcast_pyobj` for its rank 0's next requests (its
        collective is the intake, see signatures.INTAKE_CALLERS): it waits for rank 0."""
        frame = self.block_frame
        return self.block is Block.EVENT_LOOP and frame is not None and is_intake_caller(frame)

    def key(self) -> tuple[tuple[str, str, int | None], ...]:
        """A comparable fingerprint of the stack (to tell whether it moved between samples)."""
        return tuple((f.name, f.short_filename or f.filename, f.line) for f in self.frames)

    def calls(self) -> tuple[tuple[str, str], ...]:
        """The chain of functions, without line numbers: a loop spinning inside the same
        functions keeps it; work that moves on changes it."""
        return tuple((f.name, f.short_filename or f.filename) for f in self.frames)

    def describe(self) -> str:
        """`blocked in broadcast (torch/distributed/distributed_c10d.py:2968)`-style state text."""
        where = _where(self.block_frame or self.top)
        stage_part = ""
        sf = self.stage_frame
        if sf is not None and sf is not self.block_frame:
            stage_part = f" in {split_name(sf.name)[1]}"
        text = _BLOCK_TEXT.get(self.block, "at")
        if self.in_intake:
            frame = self.block_frame
            if frame is not None and split_name(frame.name)[1] == PULL_RAW_REQS:
                return f"waiting for the previous pipeline stage's next requests in {where}"
            return f"waiting for its TP rank 0's next requests in {where}"
        if self.block is Block.CPU:
            return f"running on CPU: {where}"
        if self.block is Block.PARKED:
            return f"parked (sleep or blocking call) in {where}"
        return f"{text} {where}{stage_part}".strip()


_BLOCK_TEXT = {
    Block.COLLECTIVE: "blocked in collective",
    Block.RENDEZVOUS: "waiting for peers to join a process group:",
    Block.CUDA_SYNC: "waiting at a CUDA sync point",
    Block.RAY_GET: "waiting in ray.get",
    Block.WAIT: "waiting on a future/event",
    Block.HTTP: "waiting on HTTP",
    Block.EVENT_LOOP: "event loop idle (coroutines waiting on I/O)",
    Block.SUBPROCESS: "waiting for a child process",
    Block.SLEEP: "sleeping",
    Block.IDLE_WORKER: "idle Ray worker (no method running)",
    Block.UNKNOWN: "at",
}


def _where(frame: Frame | None) -> str:
    return frame.where if frame is not None else "?"


def _is_library(frame: Frame) -> bool:
    path = frame.filename.replace("\\", "/")
    return any(m in path for m in _LIBRARY_MARKS)


def find_stage(frames: tuple[Frame, ...]) -> tuple[Stage | None, int | None, FrameSig | None]:
    """Innermost non-generic match decides; a generic row decides only if nothing else matched."""
    generic: tuple[Stage, int, FrameSig] | None = None
    for i, frame in enumerate(frames):
        sig = match_frame(frame)
        if sig is None:
            continue
        if not sig.generic:
            return sig.stage, i, sig
        if generic is None:
            generic = (sig.stage, i, sig)
    if generic is not None:
        return generic
    return None, None, None


def find_block(frames: tuple[Frame, ...], active: bool) -> tuple[Block, int | None]:
    """The innermost wait primitive, looking through library frames (not through user code)."""
    python_seen = 0
    for i, frame in enumerate(frames):
        sig = wait_of(frame)
        if sig is not None and sig.own_call and (python_seen or active):
            sig = None  # it called Python code, or runs on the CPU: not its own native wait
        if sig is not None:
            if python_seen and active and sig.block in (Block.EVENT_LOOP, Block.WAIT):
                # running library code called from an event loop / pool: it is working
                return Block.CPU, _first_python(frames)
            if sig.block is Block.COLLECTIVE:
                intake = _intake_caller(frames, i)
                if intake is not None:
                    return Block.EVENT_LOOP, intake
            return sig.block, i
        if frame.native or is_transparent(frame):
            continue
        python_seen += 1
        if python_seen > _SCAN_LIMIT or not _is_library(frame) or match_frame(frame) is not None:
            break
    first = _first_python(frames)
    if first is None:
        return Block.UNKNOWN, None
    return (Block.CPU if active else Block.PARKED), first


def _intake_caller(frames: tuple[Frame, ...], start: int) -> int | None:
    """The index of a scheduler's request intake (`broadcast_pyobj`, a later PP stage's
    `_pull_raw_reqs`) that called the collective at `start`, looking outward through the
    collective's own frames (torch's c10d, transparent wrappers, native frames, `INTAKE_VIA`);
    None when the first other frame is anything else."""
    for j in range(start, len(frames)):
        frame = frames[j]
        if is_intake_caller(frame):
            return j
        if frame.native or is_transparent(frame) or is_intake_via(frame):
            continue
        sig = wait_of(frame)
        if sig is None or sig.block is not Block.COLLECTIVE:
            return None
    return None


def _first_python(frames: tuple[Frame, ...]) -> int | None:
    for i, f in enumerate(frames):
        if not f.native and not is_transparent(f):
            return i
    for i, f in enumerate(frames):
        if not f.native:
            return i
    return None


# multiprocessing's child entry (signatures/python.py FORK_ENTRY): in a forked child every frame
# outside it is the parent's, copied at the fork (slime's router keeps
# `RolloutManager.__init__ -> _start_router -> Process.start -> Popen._launch` below it for life).
_FORK_ENTRY = FORK_ENTRY


def own_frames(frames: tuple[Frame, ...]) -> tuple[Frame, ...]:
    """The frames a process runs itself: innermost first, up to its multiprocessing entry (a forked
    child's inherited frames cut off); all of them for any other process."""
    for i, f in enumerate(frames):
        if f.native or split_name(f.name)[1] != _FORK_ENTRY[0]:
            continue
        if (f.short_filename or f.filename).replace("\\", "/").endswith(_FORK_ENTRY[1]):
            return frames[: i + 1]
    return frames


# What a thread's frames and activity decide (its stage, its block): the same for every thread
# with the same stack, so one analysis reads each distinct stack once (`Reads`)
_Decided = tuple[Stage | None, int | None, FrameSig | None, Block, int | None]
Reads = dict[tuple[tuple[Frame, ...], bool], _Decided]


def _decide(frames: tuple[Frame, ...], active: bool) -> _Decided:
    own = own_frames(frames)
    stage, stage_index, sig = find_stage(own)
    block, block_index = find_block(own, active)
    return stage, stage_index, sig, block, block_index


def read_thread(ts: ThreadStack, pid: int, reads: Reads | None = None) -> ThreadRead:
    """One thread's read. `reads`: what earlier threads of the same analysis decided, by stack
    (a 64-node job's 512 train ranks share a few dozen distinct stacks)."""
    if reads is None:
        decided = _decide(ts.frames, ts.active)
    else:
        key = (ts.frames, ts.active)
        decided = reads.get(key) or reads.setdefault(key, _decide(ts.frames, ts.active))
    stage, stage_index, sig, block, block_index = decided
    main = ts.name == "MainThread" or ts.os_thread_id == pid
    return ThreadRead(
        thread_id=ts.thread_id,
        name=ts.name,
        active=ts.active,
        main=main,
        frames=ts.frames,
        stage=stage,
        stage_index=stage_index,
        stage_sig=sig,
        block=block,
        block_index=block_index,
    )


@dataclass(frozen=True)
class ProcessRead:
    """One process at one sample: its deciding thread, its asyncio loop thread, all threads."""

    pid: int
    node_ip: str | None
    sample: int
    via: StackVia
    title: str | None
    primary: ThreadRead
    threads: tuple[ThreadRead, ...]
    native: bool = False

    @property
    def stage(self) -> Stage | None:
        return self.primary.stage

    @property
    def block(self) -> Block:
        return self.primary.block

    @property
    def loop(self) -> ThreadRead | None:
        for t in self.threads:
            if t.is_loop_thread:
                return t
        return None

    @property
    def cpu_busy(self) -> bool:
        """Some thread runs Python code (not a spin at a CUDA sync)."""
        return any(t.block is Block.CPU for t in self.threads)

    def describe(self) -> str:
        return self.primary.describe()


def choose_primary(threads: tuple[ThreadRead, ...]) -> ThreadRead:
    """The thread that says what the process is doing.

    The main thread when it has a stage; a worker thread instead when the main thread only waits
    for it (e.g. the RolloutManager's main thread parked in Future.result while its loop thread runs
    the reward function).
    """
    staged = [t for t in threads if t.stage is not None]
    main = next((t for t in threads if t.main), None)
    if not staged:
        return main or _busiest(threads)
    best = next((t for t in staged if t.main), staged[0])
    if best.block in (Block.WAIT, Block.EVENT_LOOP, Block.IDLE_WORKER):
        others = [t for t in staged if t is not best and t.block not in (Block.WAIT,)]
        if others:
            working = [t for t in others if t.block is Block.CPU or t.block in COLLECTIVE_BLOCKS]
            return (working or others)[0]
    return best


def _busiest(threads: tuple[ThreadRead, ...]) -> ThreadRead:
    for t in threads:
        if t.block is Block.CPU:
            return t
    return threads[0]


def read_process(obs: StackObs, reads: Reads | None = None) -> ProcessRead | None:
    stack: ProcessStack = obs.stack
    threads = tuple(read_thread(ts, obs.pid, reads) for ts in stack.threads if ts.frames)
    if not threads:
        return None
    return ProcessRead(
        pid=obs.pid,
        node_ip=obs.node_ip,
        sample=obs.sample,
        via=obs.via,
        title=stack.title,
        primary=choose_primary(threads),
        threads=threads,
        native=stack.native,
    )


@dataclass(frozen=True)
class CollectiveCall:
    """The collective a thread waits in, as the job called it: the op (the outermost function of
    the communication layers it went through: `all_gather_object`, not the `all_gather` inside
    it; a native wait's own name where no layer's Python frame is on the stack: an asynchronous
    collective's `handle.wait()`), and the call site (the first frame outward that is no
    communication layer's, `signatures.COMM_LAYERS`: the job's own code that issued it)."""

    op: str
    site: Frame | None

    @property
    def where(self) -> str:
        """`all_reduce at slime/backends/megatron_utils/model.py:7 (train_one_step)`."""
        if self.site is None:
            return self.op
        loc = self.site.short_filename or self.site.filename
        line = f":{self.site.line}" if self.site.line is not None else ""
        return f"{self.op} at {loc}{line} ({split_name(self.site.name)[1]})"


def collective_call(thread: ThreadRead) -> CollectiveCall | None:
    """The collective `thread` waits in and the code that issued it; at a CUDA sync (where an
    NCCL rank's CPU waits for its collective's kernel), the sync and the code that called it.
    None where its stack waits in neither (a rendezvous, the request intake, anything else)."""
    if thread.block not in (Block.COLLECTIVE, Block.CUDA_SYNC) or thread.block_index is None:
        return None
    block = thread.frames[thread.block_index]
    sig = wait_of(block)
    op = sig.func if block.native and sig is not None else split_name(block.name)[1]
    for frame in thread.frames[thread.block_index :]:
        if frame.native or is_transparent(frame):
            continue
        if thread.block is Block.CUDA_SYNC and wait_of(frame) is not None:
            op = split_name(frame.name)[1]
            continue
        if not is_comm_layer(frame):
            return CollectiveCall(op, frame)
        op = split_name(frame.name)[1]
    return CollectiveCall(op, None)


def intake_call(thread: ThreadRead) -> CollectiveCall | None:
    """A TP rank's request intake as the collective it is: `broadcast_pyobj` of its TP rank 0's
    next requests, and the scheduler's frame that called it (the first frame outward that is no
    communication layer's nor an intake helper's: `_broadcast_reqs_across_ranks`). None where
    `thread` is not in the intake, or where its intake is a later pipeline stage's
    `_pull_raw_reqs` (a receive from the previous stage, no collective of its TP group)."""
    if not thread.in_intake or thread.block_index is None:
        return None
    op = split_name(thread.frames[thread.block_index].name)[1]
    if op == PULL_RAW_REQS:
        return None
    for frame in thread.frames[thread.block_index + 1 :]:
        if frame.native or is_transparent(frame) or is_comm_layer(frame) or is_intake_via(frame):
            continue
        return CollectiveCall(op, frame)
    return CollectiveCall(op, None)


def highlight(thread: ThreadRead) -> tuple[int, ...]:
    """Indexes of the deciding frames (stage and block) of a thread."""
    idx = {i for i in (thread.stage_index, thread.block_index) if i is not None}
    return tuple(sorted(idx))
