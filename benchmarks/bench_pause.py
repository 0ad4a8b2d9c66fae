"""Target 4a: the pause one py-spy dump imposes on a busy target, blocking vs --nonblocking.

The target (busy_target.py) does pure-Python work in units of a few microseconds and records its
own longest gap between two units, and how many units it did; it has 1 thread, or 1 busy + 31 idle
threads like a Ray worker. For each mode, SAMPLES times: reset the target's counters, run one
``py-spy dump --json --pid P`` (the product's default: blocking, the target is stopped while it is
read) or the same with ``--nonblocking`` (read while it runs), or nothing for the same time
(baseline: what a shared 2-core machine's scheduler costs by itself), then read the target's
counters. The target is pinned to one core and py-spy to another, so that py-spy's own CPU does not
compete with the target (on a GPU node there are cores to spare): what remains is the stop itself.
Reported per mode: the target's longest stall during the dump and its lost progress
(units it would have done at its undisturbed rate minus units done, as time).

Standalone: ``python -m benchmarks.bench_pause``.
"""

from __future__ import annotations

import json
import mmap
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.machine import REPO_ROOT, load_snapshot, pyspy_path
from benchmarks.measure import summary

SAMPLES = 30
THREADS = (1, 32)
SETTLE_S = 0.3  # between samples: the target runs undisturbed
TARGET_CPU = 0  # the target runs on this core, py-spy on the next one (when there are two)


def _pin(pid: int, cpu: int) -> None:
    """Pin `pid` (0: this thread, and the children it starts) to `cpu`, if the machine has it."""
    if (os.cpu_count() or 1) > cpu:
        os.sched_setaffinity(pid, {cpu})


class Target:
    """A running busy_target and its shared counters."""

    def __init__(self, idle_threads: int, tmp: Path) -> None:
        self.path = tmp / f"state-{idle_threads}"
        self.path.write_bytes(b"\0" * 32)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.busy_target", str(self.path), str(idle_threads)],
            cwd=REPO_ROOT,
        )
        _pin(self.proc.pid, TARGET_CPU)
        self._fh = self.path.open("r+b")
        self.buf = mmap.mmap(self._fh.fileno(), 32)
        self.requests = 0
        time.sleep(1.0)  # interpreter start-up

    def reset(self) -> None:
        self.requests += 1
        struct.pack_into("q", self.buf, 0, self.requests)
        deadline = time.monotonic() + 5.0
        while struct.unpack_from("q", self.buf, 8)[0] != self.requests:
            if time.monotonic() > deadline:
                raise RuntimeError("the busy target stopped answering")
            time.sleep(0.0005)

    def read(self) -> tuple[float, int]:
        longest_ns, units = struct.unpack_from("qq", self.buf, 16)
        return longest_ns / 1e9, int(units)

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)
        self.buf.close()
        self._fh.close()


def _rate(target: Target, seconds: float = 1.0) -> float:
    """The target's undisturbed units per second."""
    target.reset()
    t0 = time.perf_counter()
    time.sleep(seconds)
    _, units = target.read()
    return units / (time.perf_counter() - t0)


def _one(target: Target, mode: str, rate: float, hold_s: float) -> dict[str, float]:
    target.reset()
    t0 = time.perf_counter()
    if mode == "baseline":
        time.sleep(hold_s)
    else:
        argv = [pyspy_path(), "dump", "--json", "--pid", str(target.proc.pid)]
        if mode == "nonblocking":
            argv.append("--nonblocking")
        subprocess.run(argv, capture_output=True, timeout=30, check=True)
    elapsed = time.perf_counter() - t0
    longest, units = target.read()
    lost_s = max(0.0, elapsed - units / rate)
    return {"dump_s": elapsed, "longest_stall_s": longest, "lost_s": lost_s}


def measure_threads(idle_threads: int, tmp: Path, samples: int | None = None) -> dict[str, Any]:
    samples = SAMPLES if samples is None else samples
    target = Target(idle_threads, tmp)
    mask = os.sched_getaffinity(0)
    _pin(0, TARGET_CPU + 1)  # this thread, so py-spy too, runs beside the target
    try:
        rate = statistics.median(_rate(target) for _ in range(3))
        rows: dict[str, list[dict[str, float]]] = {"blocking": [], "nonblocking": []}
        for _ in range(samples):  # interleaved, so drift in the machine's load hits all modes
            for mode, done in rows.items():
                done.append(_one(target, mode, rate, 0.0))
                time.sleep(SETTLE_S)
        hold = statistics.median(r["dump_s"] for r in rows["blocking"])
        rows["baseline"] = []
        for _ in range(samples):
            rows["baseline"].append(_one(target, "baseline", rate, hold))
            time.sleep(SETTLE_S)
    finally:
        os.sched_setaffinity(0, mask)
        target.close()
    return {
        "threads": idle_threads + 1,
        "units_per_s": round(rate),
        "modes": {
            mode: {
                "dump_ms": summary([1000 * r["dump_s"] for r in rs]),
                "longest_stall_ms": summary([1000 * r["longest_stall_s"] for r in rs]),
                "lost_ms": summary([1000 * r["lost_s"] for r in rs]),
            }
            for mode, rs in rows.items()
        },
    }


def run() -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hd-bench-pause-") as tmp:
        results = [measure_threads(n - 1, Path(tmp)) for n in THREADS]
    return {"targets": results, "samples": SAMPLES, "load": load_snapshot()}


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
