"""Kernel-side state of the slime processes: disk sleep, where they sleep, storage bytes moved.

Between the two samples, a process (or a thread of it) in D state whose read and write bytes did not
move is stuck in the kernel (storage that does not answer: NFS, Lustre, a FUSE object-store mount);
one whose bytes moved is writing slowly (verl#2238: 22-36 min per MoE checkpoint save). A process
with no D state that waits in a collective is a collective problem, not storage. OOM-killer lines of
the kernel log name a process that is gone (verl-omni#433: the engine killed in wake_up, the
trainer polling forever; slime#205: host RAM exhausted after 12 h). A nearly full /dev/shm fails
NCCL's shared-memory transport in posix_fallocate (or hangs a collective where the error is
swallowed) and kills DataLoader workers with a bus error. A hang in a checkpoint save or load is
told apart here: storage (ranks writing, in D state) against a collective mismatch.

The whole kernel source in the analysis is this part: its reads of the facts (`kernel_reads`),
suspects, storage progress, findings, next steps and the checkpoint cause.
"""

from __future__ import annotations

from dataclasses import dataclass

from slime_hangdoctor.analysis.readers.proof import Moved, Proof, Signal, window_s
from slime_hangdoctor.analysis.source_analysis import (
    MEDIUM,
    Cause,
    Reading,
    Reads,
    Source,
    SourceAnalysis,
    Suspect,
    cause,
)
from slime_hangdoctor.analysis.world import Proc, World, pid_entry, who
from slime_hangdoctor.parsers.kernel import RUNNING, SPEC, TRACED, ProcessKernelState
from slime_hangdoctor.parsers.processes import STATUS_DISK_SLEEP
from slime_hangdoctor.verdict import Finding, Severity, Stage, Status

KERNEL = Source("kernel")  # the Linux kernel's side: D state, wchan, storage bytes, /dev/shm, OOM

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
SHM_LOW_BYTES = 1 << 30
SHM_LOW_FRACTION = 0.05


@dataclass(frozen=True)
class KernelRead:
    """One process's kernel-side view over the samples (typed for other rules)."""

    proc: Proc
    first: ProcessKernelState
    last: ProcessKernelState
    samples: int  # how many samples read it

    def _grown(self, *counters: str) -> int | None:
        """The growth of these /proc/<pid>/io counters (summed) between the first and the last
        sample; None without both readings or with one sample."""
        a, b = self.first.io, self.last.io
        if a is None or b is None or self.samples < 2:
            return None
        return sum(max(0, int(getattr(b, c)) - int(getattr(a, c))) for c in counters)

    @property
    def io_delta(self) -> int | None:
        """Storage bytes read + written between the first and the last sample."""
        return self._grown("read_bytes", "write_bytes")

    @property
    def written(self) -> int | None:
        return self._grown("write_bytes")

    @property
    def chars_written(self) -> int | None:
        """Bytes the process handed to write() calls that returned, between the samples (wchar:
        pipes and sockets included; a write still blocked has not added its bytes yet)."""
        return self._grown("wchar")

    @property
    def chars_moved(self) -> int | None:
        """Bytes its read and write calls returned between the samples (rchar + wchar: files,
        pipes and sockets; on NFS, FUSE and the page cache the storage layer's read_bytes count
        nothing of a read)."""
        return self._grown("rchar", "wchar")

    @property
    def io_wait(self) -> bool:
        """Its work between the samples is I/O: it waits on I/O (in disk sleep, or asleep in a
        storage or pipe read or write: IO_WAITS) at one sample at least, and at the other it waits
        on I/O too or runs (R: on a CPU or in the run queue, as a reader is between two reads,
        working on the bytes the last one returned; on a loaded node it waits there for a CPU).
        A sample read while py-spy held the process says nothing: the other sample decides. A
        sleep of another kind (a futex, a poll, a socket) at either sample is not an I/O wait."""
        states = (self.first, self.last)
        return (
            self.samples >= 2
            and all(_io_wait(k) or _in_between(k) for k in states)
            and any(_io_wait(k) for k in states)
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
        """Asleep in a write wait (WRITE_WAITS) across the samples, no storage byte and less than
        IO_PROGRESS_BYTES handed to write() in between: the reader behind the pipe or socket
        stopped taking data. The allowance is the doctor's own doing: py-spy's attach interrupts
        the blocked write, which returns what it had copied (at most the pipe's capacity,
        /proc/sys/fs/pipe-max-size: 1 MiB by default) and blocks again. A sample read while
        py-spy held the process (tracing stop) says nothing, nor one that reads it running (R):
        the write py-spy's attach interrupted restarts, and on a loaded node the process waits
        in the run queue before it blocks again. The other sample decides."""
        states = (self.first, self.last)
        return (
            self.samples >= 2
            and all(k.wchan in WRITE_WAITS or _in_between(k) for k in states)
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
        k = self.first if _in_between(self.last) and not _in_between(self.first) else self.last
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


def _io_wait(k: ProcessKernelState) -> bool:
    return k.in_disk_sleep or k.wchan in IO_WAITS


def _in_between(k: ProcessKernelState) -> bool:
    """Read while py-spy held it or while it ran: says less of what it waits for than a sleep."""
    return traced(k) or k.state == RUNNING


def traced(k: ProcessKernelState) -> bool:
    """Read while a tracer held the process (py-spy dumps it during the same sample): its state
    and wchan then show the tracing stop, not what it waits for."""
    return k.state == TRACED or k.wchan == "ptrace_stop"


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def kernel_states(world: World, p: Proc) -> tuple[tuple[int, ProcessKernelState], ...]:
    """(sample, state) of one process, oldest first, where the kernel source read it."""
    table = world.memo("kernel.states", lambda: _states(world))
    return tuple(table.get((p.node_ip, p.pid)) or pid_entry(table, p.pid))


def _states(
    world: World,
) -> dict[tuple[str | None, int], list[tuple[int, ProcessKernelState]]]:
    out: dict[tuple[str | None, int], list[tuple[int, ProcessKernelState]]] = {}
    for obs in sorted(world.snapshot.facts(SPEC), key=lambda o: o.sample):
        for k in obs.fact.processes:
            out.setdefault((obs.node_ip, k.pid), []).append((obs.sample, k))
    return out


def kernel_reads(world: World) -> tuple[KernelRead, ...]:
    return world.memo("kernel.reads", lambda: _reads(world))


def _reads(world: World) -> tuple[KernelRead, ...]:
    out: list[KernelRead] = []
    for p in world.procs:
        states = kernel_states(world, p)
        if not states:
            continue
        out.append(KernelRead(p, states[0][1], states[-1][1], len({s for s, _ in states})))
    return tuple(out)


def progress(world: World) -> Moved:
    """Bytes a slime process waiting on I/O moved between the samples: work (a checkpoint, a
    weight load, a data read), slow rather than stuck."""
    window = window_s(world)
    return Moved(
        Proof.STORAGE,
        tuple(
            Signal(KERNEL, k.proc.label, f"slow: {rate(k, window)}, {moved_text(k)}")
            for k in io_movers(world)
        ),
    )


def io_movers(world: World) -> list[KernelRead]:
    """Slime processes whose I/O work moved at least IO_PROGRESS_BYTES between the samples."""
    return [
        k
        for k in kernel_reads(world)
        if k.proc.role is not None and (k.moved or 0) >= IO_PROGRESS_BYTES
    ]


def rate(k: KernelRead, window_s: float) -> str:
    """`0.5 MiB/s` of a process whose bytes move, over the window."""
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


def oom_lines(world: World) -> list[str]:
    seen: dict[str, None] = {}
    for obs in world.snapshot.facts(SPEC):
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
    if lines := _shm_lines(world):
        out.append(
            Finding(
                "shm-nearly-full",
                Severity.WARNING,
                "/dev/shm is nearly full: NCCL's shared-memory transport and DataLoader workers "
                "need it",
                tuple(lines),
            )
        )
    reads = [k for k in kernel_reads(world) if k.proc.role is not None]
    stuck = [k for k in reads if k.stuck_in_kernel]
    sleeping = [k for k in reads if k.last.in_disk_sleep and k not in stuck]
    blocked = [k for k in reads if k.stuck_writing and k not in stuck]
    held = (
        (
            "stuck-in-kernel",
            Severity.CRITICAL,
            "Slime processes in uninterruptible disk sleep at both samples with no storage "
            "byte moved: stuck storage, not a collective",
            stuck,
        ),
        (
            "stuck-writing",
            Severity.CRITICAL,
            "Slime processes blocked in a write across the samples (a pipe or socket whose "
            "reader stopped taking data) with no storage byte and under 1 MiB written in "
            "between: the storage or uploader behind it is stuck, not a collective",
            blocked,
        ),
        (
            "disk-sleep",
            Severity.INFO,
            "Slime processes in disk sleep (D state) at the last sample",
            sleeping,
        ),
    )
    out += [
        Finding(rule, sev, text, tuple(k.describe() for k in found[:6]))
        for rule, sev, text, found in held
        if found
    ]
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


def _shm_lines(world: World) -> list[str]:
    lines: list[str] = []
    seen: set[str | None] = set()
    for obs in sorted(world.snapshot.facts(SPEC), key=lambda o: -o.sample):
        shm = obs.fact.shm
        if obs.node_ip in seen or shm is None or shm.total_bytes <= 0:
            continue
        seen.add(obs.node_ip)
        if shm.free_bytes < SHM_LOW_BYTES or shm.free_bytes < SHM_LOW_FRACTION * shm.total_bytes:
            lines.append(
                f"{shm.path} on {obs.node_ip or 'this node'}: {shm.free_bytes / 2**20:.0f} MiB "
                f"free of {shm.total_bytes / 2**30:.1f} GiB"
            )
    return lines


def next_steps(reading: Reading) -> list[str]:
    if _shm_lines(reading.world):
        return ["Free /dev/shm (ls -la /dev/shm: stale segments of dead jobs) or enlarge it"]
    return []


def suspects(reads: Reads) -> list[Suspect]:
    """A slime process stuck in the kernel: D state at both samples and no storage byte moved, or
    a write to a pipe / socket asleep across the samples and nothing moving (stuck_writing)."""
    out: list[Suspect] = []
    for k in kernel_reads(reads.world):
        if k.proc.role is None or not (k.stuck_in_kernel or k.stuck_writing):
            continue
        read = k.proc.latest
        why = (
            f"in uninterruptible disk sleep at both samples ({k.where()}) with no storage byte "
            "moved: stuck in the kernel (storage that does not answer)"
            if k.stuck_in_kernel
            else f"blocked in a write across the samples ({k.where()}) with nothing moving: the "
            "pipe or socket it writes to is full and its reader stopped"
        )
        out.append(
            Suspect(
                source=KERNEL,
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


def _disk_sleep(world: World, p: Proc) -> bool:
    """The process's last /proc reading says D (uninterruptible disk sleep), or the kernel source
    saw it or one of its threads in D at the last sample."""
    states = kernel_states(world, p)
    if states and states[-1][1].in_disk_sleep:
        return True
    return bool(p.infos) and p.infos[-1][1].status == STATUS_DISK_SLEEP


def _checkpoint(r: Reading) -> Cause | None:
    """A hang in checkpoint save / load: storage (ranks writing, in D state) versus a collective
    mismatch (ranks in a collective of the save, others elsewhere or all in it: slime#1908,
    verl#2238). Its next steps differ from a train-step hang's."""
    if r.status is not Status.HUNG or r.stage is not Stage.CHECKPOINT:
        return None
    ranks = [p for p in r.world.train_ranks() if p.latest is not None]
    saving = [p for p in ranks if p.latest is not None and p.latest.stage is Stage.CHECKPOINT]
    in_coll = [p for p in saving if p.latest is not None and p.latest.primary.in_collective]
    elsewhere = [p for p in ranks if p not in saving]
    storage = [p for p in ranks if _disk_sleep(r.world, p)] or [
        p for p in saving if p not in in_coll
    ]
    ev = [f"{p.label}: {p.latest.describe()}" for p in saving + elsewhere if p.latest is not None]
    reads = {k.proc.pid: k for k in kernel_reads(r.world) if k.proc in ranks}
    ev += [
        f"{p.label} (pid {p.pid}): D state (uninterruptible disk I/O)"
        for p in ranks
        if _disk_sleep(r.world, p) and p.pid not in reads
    ]
    ev += [k.describe() for k in reads.values() if k.last.in_disk_sleep or k.io_delta]
    msg, steps = _checkpoint_case(r, ranks, saving, in_coll, elsewhere, storage, reads)
    return cause("checkpoint-stall", Severity.WARNING, msg, ev, steps)


def _checkpoint_case(
    r: Reading,
    ranks: list[Proc],
    saving: list[Proc],
    in_coll: list[Proc],
    elsewhere: list[Proc],
    storage: list[Proc],
    reads: dict[int, KernelRead],
) -> tuple[str, list[str]]:
    """The checkpoint hang's case (stuck storage, a collective mismatch, every rank in the save's
    collective, or file I/O), its message and its next steps."""
    pids = " ".join(str(p.pid) for p in (storage or saving or ranks)[:4])
    storage_steps = [
        f"for p in {pids or 'PID'}; do cat /proc/$p/wchan; echo; grep State /proc/$p/status; "
        "grep -E 'write_bytes|read_bytes' /proc/$p/io; done  (twice, a minute apart: bytes "
        "that move are slow storage, flat bytes in D state are stuck storage)",
        "Check the file system under --save (df -h, mount, NFS/Lustre/object-store client health) "
        "and whether another job writes there",
    ]
    stuck = [k for k in reads.values() if k.stuck_in_kernel or k.stuck_writing]
    if stuck:
        msg = (
            "Checkpoint save / load is stuck in storage, not in a collective: "
            + "; ".join(f"{k.proc.label} (pid {k.proc.pid}) {k.where()}" for k in stuck[:3])
            + " across the samples, nothing written between them: stuck storage"
            + (f"; {len(in_coll)} rank(s) wait for it in the save's collective" if in_coll else "")
            + "."
        )
        steps = [
            *storage_steps,
            "A write blocked in pipe_write / sk_stream_wait_memory goes to a pipe or socket: find "
            "its reader (ls -l /proc/PID/fd; the uploader or compressor the save streams to) and "
            "why it stopped reading",
        ]
    elif in_coll and (elsewhere or storage):
        msg = (
            f"Checkpoint collective mismatch: {len(in_coll)} rank(s) wait in a collective of the "
            f"save ({who([(p, p.latest.primary) for p in in_coll if p.latest])}) while "
            f"{len(elsewhere) + len([p for p in storage if p not in in_coll])} rank(s) are "
            "elsewhere or still writing: every rank must enter the same save with the same plan."
        )
        steps = [
            "Compare the stacks of the ranks in the save with the odd ones: a rank that skipped "
            "save_model, saves a different state dict, or is still finalising an earlier async "
            "save (maybe_finalize_async_save) leaves the others in the save's gather/all_reduce",
            *storage_steps[:1],
        ]
    elif in_coll:
        msg = (
            f"All {len(in_coll)} rank(s) in the checkpoint wait in a collective of the save "
            "(as in slime#1908: gather_object in save_state_dict_async_plan; verl#2238: all_reduce "
            "in a MoE dist_checkpointing save): a collective mismatch between ranks, or a rank "
            "not seen here that never entered the save."
        )
        steps = [
            "Check that every train rank (and the critic, if any) called save_model for this "
            "rollout: a missing rank or a different parallel layout (EP/TP groups) leaves the "
            "rest in the save's collective; try the next run with --async-save off to tell the "
            "async plan from the save itself",
            "A large MoE save can take tens of minutes (verl#2238): compare against an earlier "
            "save's `Timer save_model end (elapsed: ...)` log line before calling it stuck",
        ]
    else:
        msg = (
            "Checkpoint save / load is in file I/O, not in a collective: the storage under "
            "--save / --load is slow or stuck"
            + (
                " (D state: uninterruptible disk I/O)"
                if any(_disk_sleep(r.world, p) for p in ranks)
                else ""
            )
            + "."
        )
        if any(k.io_delta for k in reads.values()):
            msg += " Storage bytes moved between the samples: slow storage, not stuck."
        steps = storage_steps
    return msg, steps


def _cpu_wanted(world: World, p: Proc, window_s: float) -> float | None:
    """Seconds of the window its main thread was on a CPU or waiting for one (/proc/<pid>/schedstat
    at the first and last sample, scaled to the window); None unread."""
    seen: list[tuple[int, float, int]] = []
    for obs in world.snapshot.facts(SPEC):
        if obs.node_ip != p.node_ip:
            continue
        for k in obs.fact.processes:
            if k.pid == p.pid and k.sched is not None:
                seen.append((obs.sample, obs.at, k.sched.run_ns + k.sched.wait_ns))
    if len({s for s, _, _ in seen}) < 2:
        return None
    seen.sort()
    (_, t0, a), (_, t1, b) = seen[0], seen[-1]
    if t1 <= t0:
        return None
    return (b - a) / 1e9 / (t1 - t0) * window_s


ANALYSIS = SourceAnalysis(
    name="kernel",
    gives=(KERNEL,),
    progress=progress,
    suspects=suspects,
    causes=(_checkpoint,),
    findings=lambda r: kernel_findings(r.world),
    next_steps=next_steps,
    io_wait=lambda world, p: any(
        k.in_disk_sleep or (k.wchan or "") in WRITE_WAITS for _, k in kernel_states(world, p)
    ),
    cpu_wanted=_cpu_wanted,
)
