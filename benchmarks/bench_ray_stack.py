"""Target 2: our stack collection beside `ray stack`, on the same cluster and the same processes.

`ray stack` (Ray's CLI) greps ``ps aux`` for Ray workers and runs ``sudo py-spy dump --pid P
--native`` for each, one after the other. This machine has no sudo, so `ray stack` runs with a
pass-through ``sudo`` shim first on PATH that also logs every call with its start and end time:
that log says which pids `ray stack` dumped and how long its dump loop took. The real py-spy binary's
directory comes next on PATH, so `ray stack` and the product run the same py-spy.

Ours: the product's own `collect.pyspy.dump_stack` for exactly those pids, at the product's
concurrency (`CollectOptions.concurrency`), as `attach` runs it: Python stacks (its default), and
with `--native` (what `ray stack` shows) for a like-for-like comparison. Each round runs both
tools back to back (the order alternates); the ratio is ours / `ray stack` within one round.

Standalone: ``python -m benchmarks.bench_ray_stack``.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.demo_job import DemoJob, running_demo
from benchmarks.machine import load_snapshot, pyspy_path
from benchmarks.measure import run_measured, summary

ROUNDS = 3
TARGET_RATIO = 0.5
SUDO_SHIM = """#!/bin/sh
# pass-through sudo for `ray stack` on a machine without sudo; logs each call
printf 'start %s %s\\n' "$(date +%s.%N)" "$*" >> "$HD_SUDO_LOG"
"$@"
rc=$?
printf 'end %s %s\\n' "$(date +%s.%N)" "$*" >> "$HD_SUDO_LOG"
exit $rc
"""
_LINE = re.compile(r"^(start|end) (\d+\.\d+) (.*)$")
_PID = re.compile(r"dump --pid (\d+)")


def ray_cli() -> list[str]:
    beside = Path(sys.executable).parent / "ray"
    return [str(beside)] if beside.is_file() else [sys.executable, "-m", "ray.scripts.scripts"]


def make_shim(directory: Path) -> Path:
    shim = directory / "sudo"
    shim.write_text(SUDO_SHIM)
    shim.chmod(0o755)
    return shim


def parse_sudo_log(text: str) -> dict[str, Any]:
    """pids `ray stack` dumped (in order) and the span of its dump loop."""
    pids: list[int] = []
    starts: list[float] = []
    ends: list[float] = []
    for line in text.splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        kind, when, args = m.group(1), float(m.group(2)), m.group(3)
        pid = _PID.search(args)
        if pid is None:
            continue  # `sudo true`
        if kind == "start":
            pids.append(int(pid.group(1)))
            starts.append(when)
        else:
            ends.append(when)
    loop = (max(ends) - min(starts)) if starts and ends else 0.0
    return {"pids": pids, "dump_loop_s": round(loop, 3)}


def run_ray_stack(shim_dir: Path) -> dict[str, Any]:
    log = shim_dir / "sudo.log"
    log.write_text("")
    path = os.pathsep.join([str(shim_dir), str(Path(pyspy_path()).parent), os.environ["PATH"]])
    m = run_measured(
        [*ray_cli(), "stack"], timeout=600, env={"PATH": path, "HD_SUDO_LOG": str(log)}
    )
    parsed = parse_sudo_log(log.read_text())
    dumped = m.stdout.count("Stack dump for ")
    titles = sorted({_title(line) for line in m.stdout.splitlines() if "Stack dump for " in line})
    return {
        "wall_s": round(m.wall_s, 3),
        "cpu_s": round(m.cpu_s, 3),
        "rc": m.rc,
        "dumps": dumped,
        "pids": parsed["pids"],
        "dump_loop_s": parsed["dump_loop_s"],
        "cli_overhead_s": round(m.wall_s - parsed["dump_loop_s"], 3),
        "titles": titles,
    }


def _title(line: str) -> str:
    """The process title in `ray stack`'s "Stack dump for <ps aux line>" header."""
    fields = line.split("Stack dump for ", 1)[1].split(None, 10)
    return fields[10].split()[0] if len(fields) > 10 else "?"


def ray_stack_selection() -> list[int]:
    """The pids `ray stack` would pick now: its own ``ps aux | grep -E ' ray::|default_worker.py'
    | grep -v raylet`` (for the rounds where ours runs first)."""
    import subprocess

    out = subprocess.run(["ps", "aux"], capture_output=True, text=True, timeout=30, check=False)
    pids = []
    for line in out.stdout.splitlines():
        if re.search(r" ray::|default_worker.py", line) and "raylet" not in line:
            pids.append(int(line.split()[1]))
    return pids


def run_ours(pids: list[int], *, native: bool) -> dict[str, Any]:
    """The product's stack collection for `pids`: dump_stack at the product's concurrency."""
    import resource

    from slime_hangdoctor.bundle import BundleWriter
    from slime_hangdoctor.collect.options import CollectOptions
    from slime_hangdoctor.collect.pyspy import dump_stack

    opts = CollectOptions(native=native)
    timeout = opts.probe_timeout_s + (3.0 if native else 0.0)
    with tempfile.TemporaryDirectory(prefix="hd-bench-stacks-") as tmp:
        writer = BundleWriter(Path(tmp) / "b", command="bench")
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        with cf.ThreadPoolExecutor(max_workers=max(2, opts.concurrency)) as pool:
            records = list(
                pool.map(
                    lambda pid: dump_stack(
                        writer, pid, node_ip=None, sample=0, timeout=timeout, native=native
                    ),
                    pids,
                )
            )
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    outcomes: dict[str, int] = {}
    for r in records:
        outcomes[r.outcome.value] = outcomes.get(r.outcome.value, 0) + 1
    return {
        "wall_s": round(wall, 3),
        "pyspy_cpu_s": round(
            (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime), 3
        ),
        "outcomes": outcomes,
        "concurrency": opts.concurrency,
    }


def _round_result(
    ray: dict[str, Any], ours: dict[str, Any], ours_native: dict[str, Any], order: str
) -> dict[str, Any]:
    return {
        "order": order,
        "ray_stack": ray,
        "ours": ours,
        "ours_native": ours_native,
        "ratio": round(ours["wall_s"] / ray["wall_s"], 4) if ray["wall_s"] else None,
        "ratio_native": round(ours_native["wall_s"] / ray["wall_s"], 4) if ray["wall_s"] else None,
        "ratio_vs_dump_loop": (
            round(ours["wall_s"] / ray["dump_loop_s"], 4) if ray["dump_loop_s"] else None
        ),
        "ratio_native_vs_dump_loop": (
            round(ours_native["wall_s"] / ray["dump_loop_s"], 4) if ray["dump_loop_s"] else None
        ),
    }


def measure(job: DemoJob, rounds: int = ROUNDS) -> dict[str, Any]:
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="hd-bench-sudo-") as tmp:
        shim_dir = Path(tmp)
        make_shim(shim_dir)
        for i in range(rounds):
            if i % 2 == 1:  # ours first, on the pids `ray stack`'s own selection picks now
                pids = ray_stack_selection()
                ours = run_ours(pids, native=False)
                ours_native = run_ours(pids, native=True)
                ray = run_ray_stack(shim_dir)
                results.append(_round_result(ray, ours, ours_native, order="ours first"))
                results[-1]["same_pids"] = sorted(pids) == sorted(ray["pids"])
            else:
                ray = run_ray_stack(shim_dir)
                ours = run_ours(ray["pids"], native=False)
                ours_native = run_ours(ray["pids"], native=True)
                results.append(_round_result(ray, ours, ours_native, order="ray stack first"))
                results[-1]["same_pids"] = True
    ratios = [r["ratio"] for r in results if r["ratio"] is not None]
    first = results[0]
    return {
        "dashboard_url": job.dashboard_url,
        "rounds": results,
        "processes": len(first["ray_stack"]["pids"]),
        "ratio_first_round": first["ratio"],
        "ratio": summary(ratios),
        "ratio_native": summary([r["ratio_native"] for r in results if r["ratio_native"]]),
        "ray_stack_wall_s": summary([r["ray_stack"]["wall_s"] for r in results]),
        "ray_stack_dump_loop_s": summary([r["ray_stack"]["dump_loop_s"] for r in results]),
        "ours_wall_s": summary([r["ours"]["wall_s"] for r in results]),
        "ours_native_wall_s": summary([r["ours_native"]["wall_s"] for r in results]),
        "target_ratio": TARGET_RATIO,
        "met": statistics.median(ratios) <= TARGET_RATIO if ratios else False,
        "load": load_snapshot(),
    }


def run(shared: DemoJob | None = None) -> dict[str, Any]:
    if shared is not None:
        return measure(shared)
    with running_demo() as job:
        return measure(job)


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
