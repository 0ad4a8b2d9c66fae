"""Where a long-lived `watch`'s memory goes (issue 43 item 2): the heap, run by run.

    nice -n 10 python -m benchmarks.bench_watch_heap [--runs 60] [--out FILE]

Starts the demo's `rollout_engine_stuck` job (benchmarks/demo_job.py), then runs the real
`watchdog.run.watch_loop` in this process against its dashboard URL twice, RUNS runs each with a
stall bundle per stall (`--stall-after 0`-like: STALL_AFTER_S), alternating two arms in one process
each (a child per arm, so that neither inherits the other's heap):
- `release`: the loop as shipped (watchdog/heap.py: arenas capped, `malloc_trim` after each run);
- `keep`: the same loop with `cap_arenas` and `release_free_memory` replaced by no-ops (the tree
  before the fix, which the two-hour soak of docs/reliability.md 5c measured).
After every run (`on_result`) it reads, in the watch's own process: RSS (/proc/self/statm), the
bytes Python's objects hold (tracemalloc, started before the first run), glibc's `mallinfo2()`
(bytes in use, free bytes held in the arenas, the arenas' size) and the count of live objects.

What separates the causes: objects that pile up show in tracemalloc and the object count; free
bytes glibc keeps show in `fordblks` with the in-use bytes flat. A benchmark, not a test: it takes a
demo job and minutes of CPU.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import multiprocessing
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

RUNS = 60
STALL_AFTER_S = 30


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def _reading(run: int, t0: float) -> dict[str, Any]:
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _MallInfo2
    mi = libc.mallinfo2()
    with open("/proc/self/statm") as f:
        rss = int(f.read().split()[1]) * 4096
    return {
        "run": run,
        "t": round(time.monotonic() - t0, 1),
        "rss_kib": rss >> 10,
        "python_objects_kib": tracemalloc.get_traced_memory()[0] >> 10,
        "malloc_in_use_kib": mi.uordblks >> 10,
        "malloc_free_held_kib": mi.fordblks >> 10,
        "malloc_arenas_kib": mi.arena >> 10,
        "malloc_mmapped_kib": mi.hblkhd >> 10,
        "live_objects": len(gc.get_objects()),
    }


def _arm(name: str, url: str, runs: int, out: Any) -> None:
    from slime_hangdoctor.collect.options import WATCHDOG_DEFAULTS
    from slime_hangdoctor.watchdog import heap
    from slime_hangdoctor.watchdog import run as watchdog

    if name == "keep":
        heap.cap_arenas = lambda arenas=heap.ARENA_MAX: False  # type: ignore[assignment]
        heap.release_free_memory = lambda: gc.collect() >= 0  # type: ignore[assignment]
    tracemalloc.start(1)
    t0 = time.monotonic()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="hd-heap-") as tmp:
        check = watchdog.CheckOptions(
            state_file=Path(tmp) / "state.json",
            stall_after_s=STALL_AFTER_S,
            bundle_dir=Path(tmp) / "bundles",
            keep_bundles=3,
        )
        watchdog.watch_loop(
            url,
            WATCHDOG_DEFAULTS,
            check,
            interval_s=1.0,
            max_runs=runs,
            on_result=lambda _r: rows.append(_reading(len(rows) + 1, t0)),
        )
    out.send(rows)


def _run_arm(name: str, url: str, runs: int) -> list[dict[str, Any]]:
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_arm, args=(name, url, runs, child))
    proc.start()
    rows: list[dict[str, Any]] = parent.recv()
    proc.join()
    return rows


def _slope_per_run(rows: list[dict[str, Any]], key: str) -> float:
    import statistics

    xs = [r["run"] for r in rows]
    ys = [r[key] for r in rows]
    return round(statistics.linear_regression(xs, ys).slope, 1) if len(rows) > 2 else 0.0


def main(runs: int = RUNS) -> dict[str, Any]:
    from benchmarks.demo_job import running_demo

    result: dict[str, Any] = {"runs_per_arm": runs, "arms": {}}
    with running_demo("rollout_engine_stuck") as job:
        for name in ("keep", "release"):
            rows = _run_arm(name, job.dashboard_url, runs)
            after = rows[len(rows) // 4 :]  # past the warm-up: first stall bundle, lazy imports
            result["arms"][name] = {
                "rows": rows,
                "kib_per_run_after_warmup": {
                    k: _slope_per_run(after, k)
                    for k in (
                        "rss_kib",
                        "python_objects_kib",
                        "malloc_in_use_kib",
                        "malloc_free_held_kib",
                    )
                },
                "first_and_last_rss_kib": [rows[0]["rss_kib"], rows[-1]["rss_kib"]],
            }
    return result


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=RUNS)
    ap.add_argument("--out", type=Path, default=None)
    ns = ap.parse_args()
    res = main(ns.runs)
    if ns.out is not None:
        ns.out.write_text(json.dumps(res, indent=1))
    summary = {k: {kk: vv for kk, vv in v.items() if kk != "rows"} for k, v in res["arms"].items()}
    print(json.dumps(summary, indent=1))
    sys.exit(0)
