"""Kernel-side state of this node's slime processes (the `kernel` artefact).

Per process: ``/proc/<pid>/stat`` (its state letter: D is disk sleep), ``/proc/<pid>/wchan`` (the
kernel function it sleeps in), ``/proc/<pid>/io`` (bytes read and written so far: compared across
the two samples it tells a slow write from a stuck one), and the stat and wchan of each of its
threads that is in D state (an async checkpoint writer is a thread or a child process). Per node:
the size and free space of ``/dev/shm`` (NCCL and PyTorch put shared-memory segments there), and
the OOM-killer lines of the kernel log (``/dev/kmsg``, read without blocking; where it cannot be
read, the artefact says why, and the analysis names a blind spot).

Read-only: procfs reads, statvfs, a non-blocking read of /dev/kmsg (each reader has its own
position: nothing is consumed for others). Bounded: MAX_THREADS per process, MAX_KMSG_BYTES of
kernel log, MAX_OOM_LINES kept, and a deadline checked between processes and log records.
"""

from __future__ import annotations

import concurrent.futures as cf
import errno
import os
import re
import time
from collections.abc import Iterable
from typing import Any

from slime_hangdoctor import bundle as bundle_format
from slime_hangdoctor.bundle import BundleWriter, ProbeClock, ProbeRecord, dumps_json
from slime_hangdoctor.collect.node_probe import NodeContext
from slime_hangdoctor.outcome import Outcome
from slime_hangdoctor.redact import utf8_prefix

MAX_THREADS = 4096
MAX_KMSG_BYTES = 4 << 20
MAX_OOM_LINES = 20
MAX_FILE_BYTES = 4096
SHM = "/dev/shm"
KMSG = "/dev/kmsg"
# What the kernel's OOM killer (mm/oom_kill.c) and a cgroup's memory controller print.
OOM_LINE = re.compile(
    r"invoked oom-killer|Out of memory|oom-kill:|Killed process \d+|oom_reaper|"
    r"Memory cgroup out of memory"
)


def scan_kernel(
    pids: Iterable[int],
    node_ip: str | None,
    deadline: float,
    procfs: str = "/proc",
    kmsg: str | None = None,
    shm: str | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """The artefact, and what could not be read."""
    problems: list[str] = []
    procs: dict[str, Any] = {}
    for pid in sorted(set(pids)):
        if time.monotonic() > deadline:
            problems.append("deadline reached: later processes not read")
            break
        row = _process(pid, procfs)
        if row is not None and _traced(row):
            row = _after_trace(pid, procfs, row, min(deadline, time.monotonic() + TRACED_WAIT_S))
        if row is not None:
            procs[str(pid)] = row
    doc: dict[str, Any] = {
        "node_ip": node_ip,
        "time": time.time(),
        "uptime_s": _uptime(procfs),
        "processes": procs,
        "shm": _shm(shm or SHM),
        "kmsg": _kmsg(kmsg or KMSG, deadline),
    }
    return doc, problems


def record_kernel(
    writer: BundleWriter,
    pids: Iterable[int],
    *,
    node_ip: str | None,
    sample: int | None,
    timeout: float,
) -> ProbeRecord:
    """Scan and store (source `kernel`); never raises."""
    clock = ProbeClock(bundle_format.KERNEL, "kernel", node_ip=node_ip, sample=sample)
    record = clock.record

    try:
        doc, problems = scan_kernel(pids, node_ip, clock.t0 + timeout)
    except Exception as exc:  # noqa: BLE001 - a collector never raises past itself
        return writer.add(record(Outcome.FAILED, f"kernel scan failed: {exc!r}"[:300]))
    reason = "; ".join(problems[:4])[:400] or None
    return writer.add(
        record(Outcome.OK, reason, processes=len(doc["processes"])),
        dumps_json(doc),
        suffix=".json",
    )


def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as fh:
            return utf8_prefix(fh.read(MAX_FILE_BYTES), MAX_FILE_BYTES).decode("utf-8", "replace")
    except OSError:
        return None


def _process(pid: int, procfs: str) -> dict[str, Any] | None:
    base = f"{procfs}/{pid}"
    stat = _read(f"{base}/stat")
    if stat is None:
        return None  # gone meanwhile
    row: dict[str, Any] = {
        "stat": stat,
        "wchan": _read(f"{base}/wchan"),
        # the main thread's time on a CPU and waiting for one (CONFIG_SCHED_INFO; absent: null)
        "schedstat": _read(f"{base}/schedstat"),
    }
    io = _read(f"{base}/io")
    row["io"] = io
    if io is None:
        row["io_error"] = "not readable (another user's process?)"
    threads: list[dict[str, Any]] = []
    try:
        tids = os.listdir(f"{base}/task")[:MAX_THREADS]
    except OSError:
        tids = []
    for tid in tids:
        tstat = _read(f"{base}/task/{tid}/stat")
        if tstat is None or _state(tstat) != "D":
            continue
        threads.append({"tid": int(tid), "stat": tstat, "wchan": _read(f"{base}/task/{tid}/wchan")})
    row["threads"] = threads
    return row


# A process in tracing stop (py-spy's dump, beside this read, holds it ~15 ms): read again for up
# to this long, so that its own state and wchan are seen (analysis/kernel.py: a traced reading
# decides nothing; read twice in tracing stop, a stuck write looked like no evidence at all).
TRACED_WAIT_S = 0.25
TRACED_POLL_S = 0.01


def _traced(row: dict[str, Any]) -> bool:
    return _state(str(row["stat"])) == "t" or (row.get("wchan") or "").strip() == "ptrace_stop"


def _after_trace(pid: int, procfs: str, row: dict[str, Any], until: float) -> dict[str, Any]:
    """Read a process that py-spy held again until it waits somewhere (not in tracing stop, and
    not running: let go, an interrupted write returns what it copied and is restarted, so the
    process runs for a moment before it blocks again). A process still running at `until` is
    read as running; one still traced, as traced."""
    while time.monotonic() < until:
        time.sleep(TRACED_POLL_S)
        again = _process(pid, procfs)
        if again is None:
            break
        row = again
        if not _traced(row) and _state(str(row["stat"])) != "R":
            break
    return row


def _state(stat: str) -> str:
    """The state letter of a stat line (after the parenthesised command name)."""
    _, _, rest = stat.rpartition(")")
    return rest.split(maxsplit=1)[0] if rest.strip() else "?"


def _uptime(procfs: str) -> float | None:
    text = _read(f"{procfs}/uptime")
    try:
        return float(text.split()[0]) if text else None
    except (ValueError, IndexError):
        return None


def _shm(path: str) -> dict[str, Any]:
    try:
        st = os.statvfs(path)
    except OSError as exc:
        return {"path": path, "error": f"{exc.strerror or exc}"}
    return {"path": path, "total": st.f_blocks * st.f_frsize, "free": st.f_bavail * st.f_frsize}


def _kmsg(path: str, deadline: float) -> dict[str, Any]:
    """OOM-killer records of the kernel log, read from its start without blocking."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        return {"readable": False, "error": f"{path}: {exc.strerror or exc}"}
    lines: list[str] = []
    total = 0
    try:
        while total < MAX_KMSG_BYTES and time.monotonic() < deadline:
            try:
                record = os.read(fd, 8192)
            except BlockingIOError:
                break  # the end of the log
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    continue  # a record was overwritten while reading: the next one follows
                return {"readable": False, "error": f"{path}: {exc.strerror or exc}"}
            if not record:
                break
            total += len(record)
            text = record.decode("utf-8", "replace").split("\n", 1)[0]
            if OOM_LINE.search(text):
                lines.append(text)
    finally:
        os.close(fd)
    return {"readable": True, "error": None, "lines": lines[-MAX_OOM_LINES:]}


def NODE_PROBE(ctx: NodeContext) -> list[cf.Future[Any]]:  # noqa: N802 - the spec's entry point
    """Kernel-side state of this node's slime processes (parsers.kernel.SPEC)."""
    return ctx.submit_over_members(record_kernel)
