"""Run one command and measure it: wall time, CPU of its whole process tree, memory.

CPU comes from ``wait4``: the kernel adds every descendant that was waited for (py-spy runs of a few
milliseconds included) to the child's own usage. psutil polls the tree every 20 ms for memory (the
peak RSS of the command's own process, the CLI, and of its whole tree) and, as a cross-check, for
CPU (the command's own and reaped children's times plus its live children's; the last poll before
the exit misses the final moments, so it reads a little lower than wait4).
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

POLL_S = 0.02


@dataclass(frozen=True)
class Measured:
    argv: tuple[str, ...]
    rc: int
    wall_s: float
    cpu_user_s: float
    cpu_sys_s: float
    peak_rss_mib: float  # the command's own process
    peak_tree_rss_mib: float  # the command and all its descendants, summed, at the worst moment
    psutil_cpu_s: float  # the same tree's CPU as psutil polling last saw it (misses the end)
    stdout: str
    stderr: str
    launched_at: float = 0.0  # epoch seconds, just before the fork
    exited_at: float = 0.0  # epoch seconds, when wait4 returned
    timed_out: bool = False

    @property
    def cpu_s(self) -> float:
        return self.cpu_user_s + self.cpu_sys_s


class _MemoryPoll(threading.Thread):
    def __init__(self, pid: int) -> None:
        super().__init__(name="rss-poll", daemon=True)
        self.pid = pid
        self.peak = 0
        self.peak_tree = 0
        self.cpu_seen = 0.0  # psutil's view: own + reaped children + live children, last poll
        self.stop = threading.Event()

    def run(self) -> None:
        import psutil

        try:
            root = psutil.Process(self.pid)
        except psutil.Error:
            return
        while not self.stop.is_set():
            try:
                own = root.memory_info().rss
                times = root.cpu_times()
                cpu = times.user + times.system + times.children_user + times.children_system
                tree = own
                for child in root.children(recursive=True):
                    try:
                        tree += child.memory_info().rss
                        ct = child.cpu_times()
                        cpu += ct.user + ct.system
                    except psutil.Error:
                        continue
            except psutil.Error:
                return
            self.cpu_seen = max(self.cpu_seen, cpu)
            self.peak = max(self.peak, own)
            self.peak_tree = max(self.peak_tree, tree)
            self.stop.wait(POLL_S)


def run_measured(
    argv: Sequence[str],
    *,
    timeout: float,
    env: Mapping[str, str | None] | None = None,
    cwd: str | None = None,
) -> Measured:
    """Run `argv` to completion (killed with its process group after `timeout`) and measure it.

    `env` is added to this process's environment; a None value removes that variable."""
    full_env = dict(os.environ)
    for key, value in (env or {}).items():
        if value is None:
            full_env.pop(key, None)
        else:
            full_env[key] = value
    launched_at = time.time()
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=full_env,
        cwd=cwd,
        start_new_session=True,
    )
    poll = _MemoryPoll(proc.pid)
    poll.start()
    out_chunks: list[bytes] = []
    err_chunks: list[bytes] = []
    readers = [
        threading.Thread(target=_drain, args=(proc.stdout, out_chunks), daemon=True),
        threading.Thread(target=_drain, args=(proc.stderr, err_chunks), daemon=True),
    ]
    for r in readers:
        r.start()
    timer = threading.Timer(timeout, _kill_group, args=(proc.pid,))
    timer.start()
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    finally:
        timer.cancel()
        poll.stop.set()
    wall = time.perf_counter() - t0
    exited_at = time.time()
    proc.returncode = os.waitstatus_to_exitcode(status)
    for r in readers:
        r.join(timeout=5.0)
    poll.join(timeout=1.0)
    return Measured(
        argv=tuple(argv),
        rc=proc.returncode,
        wall_s=wall,
        cpu_user_s=usage.ru_utime,
        cpu_sys_s=usage.ru_stime,
        peak_rss_mib=poll.peak / 2**20,
        peak_tree_rss_mib=poll.peak_tree / 2**20,
        psutil_cpu_s=poll.cpu_seen,
        stdout=b"".join(out_chunks).decode("utf-8", "replace"),
        stderr=b"".join(err_chunks).decode("utf-8", "replace"),
        launched_at=launched_at,
        exited_at=exited_at,
        timed_out=wall >= timeout,
    )


def _drain(stream: Any, into: list[bytes]) -> None:
    if stream is None:
        return
    with stream:
        for chunk in iter(lambda: stream.read(65536), b""):
            into.append(chunk)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def summary(values: Sequence[float]) -> dict[str, float]:
    """median / min / max of a few runs, rounded for the report."""
    vals = list(values)
    if not vals:
        return {}
    return {
        "median": round(statistics.median(vals), 3),
        "min": round(min(vals), 3),
        "max": round(max(vals), 3),
        "n": len(vals),
    }
