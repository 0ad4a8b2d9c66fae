"""Kernel-side state of the slime processes: disk sleep, where they sleep, storage bytes moved.

Between the two samples, a process (or a thread of it) in D state whose read and write bytes did not
move is stuck in the kernel (storage that does not answer: NFS, Lustre, a FUSE object-store mount);
one whose bytes moved is writing slowly (verl#2238: 22-36 min per MoE checkpoint save). A process
with no D state that waits in a collective is a collective problem, not storage. OOM-killer lines of
the kernel log name a process that is gone (verl-omni#433: the engine killed in wake_up, the
trainer polling forever; slime#205: host RAM exhausted after 12 h).
"""

from __future__ import annotations

from dataclasses import dataclass

from slime_hangdoctor.analysis.progress import Signal, window_s
from slime_hangdoctor.analysis.source_analysis import SourceAnalysis
from slime_hangdoctor.analysis.world import Proc, World
from slime_hangdoctor.facts import ProcessKernelState
from slime_hangdoctor.parsers.kernel import SPEC as KERNEL
from slime_hangdoctor.verdict import Finding, Role, Severity

IO_PROGRESS_BYTES = 1 << 20  # storage bytes in the window that count as work moving
# Kernel functions a writer sleeps in, interruptibly (S state, so D state alone misses them), while
# the other side does not take the bytes: a pipe or FIFO whose reader stopped (a checkpoint streamed
# to an uploader such as `aws s3 cp - URL` or a compressor), a socket whose peer stopped reading.
# Linux 6.14 split pipe_write into anon_pipe_write and fifo_pipe_write.
WRITE_WAITS = frozenset(
    {
        "pipe_write",
        "anon_pipe_write",
        "fifo_pipe_write",
        "pipe_wait_writable",
        "sk_stream_wait_memory",
    }
)
# Kernel functions a process sleeps in while it waits for a read that storage must answer: the
# page cache waiting for the block layer (folio_wait_bit_common, Linux >= 5.16; before it
# wait_on_page_bit_common), an NFS RPC (rpc_wait_bit_killable, nfs_wait_bit_killable), a FUSE
# daemon's answer (request_wait_answer: gcsfuse, s3fs, mountpoint-s3, JuiceFS), and a pipe or FIFO
# whose writer feeds it (pipe_read; anon_pipe_read and fifo_pipe_read since Linux 6.14): a stream
# from a downloader (`aws s3 cp s3://... -`) or a user-space file server. A socket read
# (sk_wait_data) is not storage.
READ_WAITS = frozenset(
    {
        "folio_wait_bit_common",
        "wait_on_page_bit_common",
        "rpc_wait_bit_killable",
        "nfs_wait_bit_killable",
        "request_wait_answer",
        "pipe_read",
        "anon_pipe_read",
        "fifo_pipe_read",
    }
)
IO_WAITS = READ_WAITS | WRITE_WAITS
OOM_RECENT_S = 24 * 3600.0


@dataclass(frozen=True)
class KernelRead:
    """One process's kernel-side view over the samples (typed for other rules)."""

    proc: Proc
    first: ProcessKernelState
    last: ProcessKernelState
    samples: int  # how many samples read it

    @property
    def io_delta(self) -> int | None:
        """Storage bytes read + written between the first and the last sample."""
        a, b = self.first.io, self.last.io
        if a is None or b is None or self.samples < 2:
            return None
        return max(0, b.read_bytes - a.read_bytes) + max(0, b.write_bytes - a.write_bytes)

    @property
    def written(self) -> int | None:
        a, b = self.first.io, self.last.io
        if a is None or b is None or self.samples < 2:
            return None
        return max(0, b.write_bytes - a.write_bytes)

    @property
    def chars_written(self) -> int | None:
        """Bytes the process handed to write() calls that returned, between the samples (wchar:
        pipes and sockets included; a write still blocked has not added its bytes yet)."""
        a, b = self.first.io, self.last.io
        if a is None or b is None or self.samples < 2:
            return None
        return max(0, b.wchar - a.wchar)

    @property
    def chars_moved(self) -> int | None:
        """Bytes its read and write calls returned between the samples (rchar + wchar: files,
        pipes and sockets; on NFS, FUSE and the page cache the storage layer's read_bytes count
        nothing of a read)."""
        a, b = self.first.io, self.last.io
        if a is None or b is None or self.samples < 2:
            return None
        return max(0, b.rchar - a.rchar) + max(0, b.wchar - a.wchar)

    @property
    def io_wait(self) -> bool:
        """It waits on I/O at both samples: in disk sleep, or asleep in a storage or pipe read or
        write (IO_WAITS). A sample read while py-spy held the process says nothing: the other
        sample decides."""
        states = (self.first, self.last)
        return (
            self.samples >= 2
            and all(k.in_disk_sleep or k.wchan in IO_WAITS or traced(k) for k in states)
            and any(k.in_disk_sleep or k.wchan in IO_WAITS for k in states)
        )

    @property
    def moved(self) -> int | None:
        """The bytes that count as its I/O work: storage bytes, or, for a process whose wait is
        I/O, the bytes its read and write calls returned when more (module doc)."""
        storage = self.io_delta
        if storage is None:
            return None
        chars = self.chars_moved if self.io_wait else None
        return max(storage, chars or 0)

    @property
    def stuck_writing(self) -> bool:
        """Asleep in a write wait (WRITE_WAITS) at both samples, no storage byte and less than
        IO_PROGRESS_BYTES handed to write() in between: the reader behind the pipe or socket
        stopped taking data. The allowance is the doctor's own doing: py-spy's attach interrupts
        the blocked write, which returns what it had copied (at most the pipe's capacity,
        /proc/sys/fs/pipe-max-size: 1 MiB by default) and blocks again. A sample read while
        py-spy held the process (tracing stop) says nothing: the other sample decides."""
        states = (self.first, self.last)
        return (
            self.samples >= 2
            and all(k.wchan in WRITE_WAITS or traced(k) for k in states)
            and any(k.wchan in WRITE_WAITS for k in states)
            and self.io_delta == 0
            and self.chars_written is not None
            and self.chars_written < IO_PROGRESS_BYTES
        )

    @property
    def disk_sleep_throughout(self) -> bool:
        return self.first.in_disk_sleep and self.last.in_disk_sleep

    @property
    def stuck_in_kernel(self) -> bool:
        """In D state at both samples and no storage byte moved in between."""
        return self.samples >= 2 and self.disk_sleep_throughout and self.io_delta == 0

    def where(self) -> str:
        k = self.first if traced(self.last) and not traced(self.first) else self.last
        parts = [f"state {k.state}"]
        if k.wchan:
            parts.append(f"in {k.wchan}")
        for t in k.blocked_threads[:3]:
            parts.append(f"thread {t.name} ({t.tid}) D in {t.wchan or '?'}")
        return ", ".join(parts)

    def describe(self) -> str:
        text = f"{self.proc.label} (pid {self.proc.pid}): {self.where()}"
        delta = self.io_delta
        if delta is not None:
            text += f"; {_mib(delta)} read+written between the samples"
        chars = self.chars_moved
        if chars is not None and self.io_wait and chars > (delta or 0):
            text += f" ({_mib(chars)} by its read/write calls, rchar+wchar)"
        return text


def traced(k: ProcessKernelState) -> bool:
    """Read while a tracer held the process (py-spy dumps it during the same sample): its state
    and wchan then show the tracing stop, not what it waits for."""
    return k.state == "t" or k.wchan == "ptrace_stop"


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def kernel_reads(world: World) -> tuple[KernelRead, ...]:
    out: list[KernelRead] = []
    for p in world.procs:
        if not p.kernel:
            continue
        out.append(KernelRead(p, p.kernel[0][1], p.kernel[-1][1], len({s for s, _ in p.kernel})))
    return tuple(out)


def io_movers(world: World) -> list[KernelRead]:
    """Slime processes whose I/O work moved at least IO_PROGRESS_BYTES between the samples."""
    return [
        k
        for k in kernel_reads(world)
        if k.proc.role is not None and (k.moved or 0) >= IO_PROGRESS_BYTES
    ]


def rate(k: KernelRead, window_s: float) -> str:
    """`slow: 0.5 MiB/s` of a process whose bytes move, over the window."""
    moved = k.moved or 0
    if window_s <= 0:
        return f"{_mib(moved)} moved"
    return f"{moved / 2**20 / window_s:.1f} MiB/s"


def moved_text(k: KernelRead) -> str:
    storage = k.io_delta or 0
    moved = k.moved or 0
    if moved > storage:
        return (
            f"{_mib(moved)} through its read/write calls between the samples while it waits on "
            f"I/O ({k.where()}; /proc/<pid>/io rchar+wchar, storage-layer bytes {_mib(storage)})"
        )
    return f"{_mib(storage)} read+written to storage between the samples ({k.where()})"


def io_signals(world: World) -> list[Signal]:
    """Bytes a slime process waiting on I/O moved between the samples: work (a checkpoint, a
    weight load, a data read), slow rather than stuck."""
    window = window_s(world)
    return [
        Signal("kernel", k.proc.label, f"slow: {rate(k, window)}, {moved_text(k)}")
        for k in io_movers(world)
    ]


def oom_lines(world: World) -> list[str]:
    seen: dict[str, None] = {}
    for obs in world.snapshot.facts(KERNEL):
        log = obs.fact.log
        if log is None or not log.readable:
            continue
        for line in log.oom_lines:
            if line.age_s is not None and line.age_s > OOM_RECENT_S:
                continue
            ago = f" ({line.age_s / 60:.0f} min ago)" if line.age_s is not None else ""
            seen.setdefault(f"{obs.node_ip or 'this node'}: {line.text}{ago}", None)
    return list(seen)


def kernel_findings(world: World) -> list[Finding]:
    out: list[Finding] = []
    reads = [k for k in kernel_reads(world) if k.proc.role is not None]
    stuck = [k for k in reads if k.stuck_in_kernel]
    sleeping = [k for k in reads if k.last.in_disk_sleep and k not in stuck]
    blocked = [k for k in reads if k.stuck_writing and k not in stuck]
    if stuck:
        out.append(
            Finding(
                "stuck-in-kernel",
                Severity.CRITICAL,
                "Slime processes in uninterruptible disk sleep at both samples with no storage "
                "byte moved: stuck storage, not a collective",
                tuple(k.describe() for k in stuck[:6]),
            )
        )
    if blocked:
        out.append(
            Finding(
                "stuck-writing",
                Severity.CRITICAL,
                "Slime processes blocked in a write at both samples (a pipe or socket whose "
                "reader stopped taking data) with no storage byte and under 1 MiB written in "
                "between: the storage or uploader behind it is stuck, not a collective",
                tuple(k.describe() for k in blocked[:6]),
            )
        )
    if sleeping:
        out.append(
            Finding(
                "disk-sleep",
                Severity.INFO,
                "Slime processes in disk sleep (D state) at the last sample",
                tuple(k.describe() for k in sleeping[:6]),
            )
        )
    writers = [k for k in reads if (k.moved or 0) >= IO_PROGRESS_BYTES]
    if writers:
        window = window_s(world)
        out.append(
            Finding(
                "storage-io",
                Severity.INFO,
                "Storage I/O between the samples (/proc/<pid>/io): bytes that move are slow "
                "storage, not stuck storage",
                tuple(f"{k.describe()}; slow: {rate(k, window)}" for k in writers[:6]),
            )
        )
    if lines := oom_lines(world):
        out.append(
            Finding(
                "oom-killer",
                Severity.WARNING,
                "The kernel's OOM killer killed processes in the last day (kernel log)",
                tuple(lines[-6:]),
            )
        )
    return out


def writers_of(world: World, role: Role) -> list[KernelRead]:
    """Processes of `role` whose I/O work moved between the samples."""
    return [k for k in io_movers(world) if k.proc.role is role]


ANALYSIS = SourceAnalysis(
    progress=io_signals,
    findings=lambda reading: kernel_findings(reading.world),
)
