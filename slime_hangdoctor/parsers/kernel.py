"""The `kernel` artefact (collect/kernel.py) and the procfs files in it -> NodeKernel. Pure.

Artefact format::

    {"node_ip": .., "time": .., "uptime_s": <float | null>,
     "processes": {"<pid>": {"stat": "<raw /proc/pid/stat>", "wchan": "<raw>" | null,
                             "io": "<raw /proc/pid/io>" | null,
                             "schedstat": "<raw /proc/pid/schedstat>" | null (absent before),
                             "threads": [{"tid": n, "stat": "<raw>", "wchan": "<raw>" | null}]}},
     "shm": {"path", "total", "free"} | {"path", "error"},
     "kmsg": {"readable": true, "lines": ["<raw /dev/kmsg record>", ..]} | {"readable": false, "error"}}
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, get_args

from slime_hangdoctor.bundle import ProbeRecord
from slime_hangdoctor.errors import ParseError
from slime_hangdoctor.parsers.json_text import load_json_object
from slime_hangdoctor.parsers.processes import SchedStat, parse_schedstat
from slime_hangdoctor.source_spec import SourceSpec

# the source's name (the `source` of its probe records, the folder under raw/): JSON: kernel-side state of one node's slime processes, /dev/shm, OOM-killer lines
KERNEL = "kernel"

_IO_KEYS = ("rchar", "wchar", "read_bytes", "write_bytes")


# --------------------------------------------------------------------------- facts


@dataclass(frozen=True)
class IoCounters:
    """/proc/<pid>/io: cumulative bytes (read_bytes/write_bytes reach the storage layer)."""

    rchar: int
    wchar: int
    read_bytes: int
    write_bytes: int


# the state letter of /proc/<pid>/stat (fs/proc/array.c task_state_array; "?" for one it adds)
TaskLetter = Literal["R", "S", "D", "T", "t", "X", "x", "Z", "P", "I", "K", "W", "?"]


TASK_LETTERS: Final[frozenset[str]] = frozenset(get_args(TaskLetter))


DISK_SLEEP: Final[TaskLetter] = "D"  # uninterruptible sleep


TRACED: Final[TaskLetter] = "t"  # tracing stop (py-spy holds it)


RUNNING: Final[TaskLetter] = "R"  # on a CPU or in the run queue, waiting for one


@dataclass(frozen=True)
class ThreadKernelState:
    tid: int
    name: str
    state: TaskLetter  # of /proc/<pid>/task/<tid>/stat
    wchan: str | None = None


@dataclass(frozen=True)
class ProcessKernelState:
    """What the kernel says one process is doing: its state, where it sleeps, its I/O so far."""

    pid: int
    state: TaskLetter  # of /proc/<pid>/stat
    wchan: str | None = None  # kernel function it sleeps in ("0" / empty: running or not shown)
    io: IoCounters | None = None  # None: not readable (another user's process without root)
    blocked_threads: tuple[ThreadKernelState, ...] = ()  # threads in D state (disk sleep)
    sched: SchedStat | None = None  # None: not read (an older bundle, a kernel without it)

    @property
    def in_disk_sleep(self) -> bool:
        return self.state == DISK_SLEEP or bool(self.blocked_threads)


@dataclass(frozen=True)
class ShmSpace:
    path: str
    total_bytes: int
    free_bytes: int


@dataclass(frozen=True)
class KernelLogLine:
    text: str
    age_s: float | None = None  # seconds before the sample, from the record's timestamp


@dataclass(frozen=True)
class KernelLog:
    """OOM-killer lines of the kernel log, where it could be read."""

    readable: bool
    why_not: str | None = None
    oom_lines: tuple[KernelLogLine, ...] = ()


@dataclass(frozen=True)
class NodeKernel:
    """One node's kernel-side view at one sample."""

    processes: tuple[ProcessKernelState, ...]
    shm: ShmSpace | None = None
    shm_error: str | None = None
    log: KernelLog | None = None


def parse_stat(text: str) -> tuple[int, str, TaskLetter]:
    """``/proc/<pid>/stat`` -> (pid, command name, state letter). The name may hold spaces and
    parentheses: it runs from the first ``(`` to the last ``)``."""
    head, sep, rest = text.rpartition(")")
    pid_text, lp, name = head.partition("(")
    fields = rest.split()
    if not sep or not lp or not fields:
        raise ParseError(f"not a /proc stat line: {text[:80]!r}")
    try:
        pid = int(pid_text)
    except ValueError:
        raise ParseError(f"stat: bad pid {pid_text[:20]!r}") from None
    state = fields[0]
    if len(state) != 1 or not state.isalpha():
        raise ParseError(f"stat: bad state {state[:10]!r}")
    return pid, name, _LETTERS.get(state, "?")


# the kernel's state letters as typed; one a newer kernel adds is "?"
_LETTERS: Mapping[str, TaskLetter] = {s: s for s in get_args(TaskLetter)}


def parse_io(text: str) -> IoCounters:
    """``/proc/<pid>/io`` (``name: value`` lines) -> IoCounters."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        try:
            values[key.strip()] = int(value.strip())
        except ValueError:
            raise ParseError(f"io: bad value in {line[:60]!r}") from None
    missing = [k for k in _IO_KEYS if k not in values]
    if missing:
        raise ParseError(f"io: missing {', '.join(missing)}")
    return IoCounters(**{k: values[k] for k in _IO_KEYS})


def parse_wchan(text: str | None) -> str | None:
    """``/proc/<pid>/wchan``: a kernel symbol, or "0"/empty when running or hidden."""
    if text is None:
        return None
    name = text.strip()
    return None if name in ("", "0") else name


def parse_kmsg_record(text: str, uptime_s: float | None) -> KernelLogLine:
    """``6,1234,5678901,-;message`` (priority, sequence, microseconds since boot, flags)."""
    prefix, sep, message = text.partition(";")
    if not sep:
        return KernelLogLine(text.strip())
    parts = prefix.split(",")
    age = None
    if len(parts) >= 3 and uptime_s is not None:
        try:
            age = max(0.0, uptime_s - int(parts[2]) / 1e6)
        except ValueError:
            age = None
    return KernelLogLine(message.strip(), age)


def parse_kernel(data: str | bytes) -> NodeKernel:
    doc = _load(data)
    procs = doc.get("processes")
    if not isinstance(procs, Mapping):
        raise ParseError("kernel: no 'processes' object")
    out: list[ProcessKernelState] = []
    for pid_text, row in procs.items():
        if not isinstance(row, Mapping) or not isinstance(row.get("stat"), str):
            raise ParseError(f"kernel: process {pid_text!r} has no stat")
        try:
            out.append(_process(row))
        except ParseError as exc:
            raise ParseError(f"kernel: process {pid_text}: {exc}") from None
    uptime = doc.get("uptime_s")
    if uptime is not None and (isinstance(uptime, bool) or not isinstance(uptime, (int, float))):
        raise ParseError("kernel: 'uptime_s' is not a number")
    shm, shm_error = _shm(doc.get("shm"))
    return NodeKernel(
        processes=tuple(sorted(out, key=lambda p: p.pid)),
        shm=shm,
        shm_error=shm_error,
        log=_log(doc.get("kmsg"), None if uptime is None else float(uptime)),
    )


def _process(row: Mapping[str, Any]) -> ProcessKernelState:
    pid, _, state = parse_stat(row["stat"])
    io_text = row.get("io")
    threads = row.get("threads") or []
    if not isinstance(threads, list):
        raise ParseError("'threads' is not a list")
    blocked: list[ThreadKernelState] = []
    for t in threads:
        if not isinstance(t, Mapping) or not isinstance(t.get("stat"), str):
            raise ParseError("a thread has no stat")
        tid, name, tstate = parse_stat(t["stat"])
        if tstate == DISK_SLEEP:
            blocked.append(ThreadKernelState(tid, name, tstate, parse_wchan(_opt_str(t, "wchan"))))
    return ProcessKernelState(
        pid=pid,
        state=state,
        wchan=parse_wchan(_opt_str(row, "wchan")),
        io=parse_io(io_text) if isinstance(io_text, str) else None,
        blocked_threads=tuple(blocked),
        sched=parse_schedstat(sched) if (sched := _opt_str(row, "schedstat")) else None,
    )


def _opt_str(row: Mapping[str, Any], key: str) -> str | None:
    value = row.get(key)
    if value is not None and not isinstance(value, str):
        raise ParseError(f"{key!r} is not a string")
    return value


def _shm(value: Any) -> tuple[ShmSpace | None, str | None]:
    if value is None:
        return None, None
    if not isinstance(value, Mapping):
        raise ParseError("kernel: 'shm' is not an object")
    path = str(value.get("path") or "/dev/shm")
    if value.get("error"):
        return None, f"{path}: {value['error']}"
    total, free = value.get("total"), value.get("free")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (total, free)):
        raise ParseError("kernel: 'shm' sizes are not non-negative integers")
    return ShmSpace(path, int(total), int(free)), None  # type: ignore[arg-type]


def _log(value: Any, uptime_s: float | None) -> KernelLog | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ParseError("kernel: 'kmsg' is not an object")
    if not value.get("readable"):
        return KernelLog(False, str(value.get("error") or "not readable"))
    lines = value.get("lines") or []
    if not isinstance(lines, list) or not all(isinstance(x, str) for x in lines):
        raise ParseError("kernel: 'kmsg' lines are not strings")
    return KernelLog(True, None, tuple(parse_kmsg_record(x, uptime_s) for x in lines))


def _load(data: str | bytes) -> Mapping[str, Any]:
    return load_json_object(data, "kernel", unit="artefact")


def _kernel_notes(node: NodeKernel, rec: ProbeRecord) -> tuple[str, ...]:
    where = rec.node_ip or "this node"
    out: list[str] = []
    if node.log is not None and not node.log.readable:
        out.append(
            f"kernel log of {where} not readable ({node.log.why_not}): OOM-killer kills there "
            "would not be seen"
        )
    if node.shm_error:
        out.append(f"/dev/shm of {where}: {node.shm_error}")
    return tuple(out)


# Kernel-side state of one node's slime processes, /dev/shm and OOM-killer lines at one sample
# (collect/kernel.py: 4 MiB of kernel log and the process states).
SPEC = SourceSpec[NodeKernel](
    name=KERNEL,
    parse=lambda data, rec: parse_kernel(data),
    max_bytes=16 * 1024 * 1024,
    partial=True,
    notes=_kernel_notes,
    node_probe="slime_hangdoctor.collect.kernel",
    analysis="slime_hangdoctor.analysis.parts.kernel",
)
