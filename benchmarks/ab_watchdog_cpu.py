"""A/B of the watchdog's `check` CPU on one `none` demo job: two source trees alternating.

    git archive BASE | tar -x -C /tmp/hd-base
    flock /work/ray.lock python -m benchmarks.ab_watchdog_cpu /tmp/hd-base .

Each round, for each tree (its PYTHONPATH: the tree and its demo/): one warm-up `check`, then
COUNTER_RUNS counters-only runs and REFRESH_RUNS runs whose counters plan is aged by REFRESH_S
(the analysed look of every 10 minutes), CPU of the CLI's whole process tree (wait4) through
benchmarks.bench_watchdog. Prints each tree's medians and its hour of cron `check` (54 counters-only
runs, 6 analysed) as a share of one core. docs/performance.md holds the figures.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from benchmarks import bench_watchdog as bench
from benchmarks.demo_job import running_demo

ROUNDS = 3
COUNTER_RUNS = 4
REFRESH_RUNS = 2


def main(trees: dict[str, str]) -> dict[str, dict[str, float]]:
    cpu: dict[str, dict[str, list[float]]] = {k: {"counters": [], "refresh": []} for k in trees}
    with running_demo("none") as job:
        for _ in range(ROUNDS):
            for name, root in trees.items():
                os.environ["PYTHONPATH"] = f"{root}{os.pathsep}{Path(root) / 'demo'}"
                with tempfile.TemporaryDirectory() as tmp:
                    state = Path(tmp) / "state.json"
                    bench._check(job, state)  # warm-up: the state now holds a counters plan
                    for _ in range(COUNTER_RUNS):
                        cpu[name]["counters"].append(bench._check(job, state).cpu_s)
                    for _ in range(REFRESH_RUNS):
                        cpu[name]["refresh"].append(bench._refresh_check(job, state).cpu_s)
    out = {}
    for name, runs in cpu.items():
        counters, refresh = statistics.median(runs["counters"]), statistics.median(runs["refresh"])
        hour = (54 * counters + 6 * refresh) / 60
        out[name] = {"counters_s": counters, "refresh_s": refresh, "hour_share": hour / 60}
    return out


if __name__ == "__main__":
    base, new = sys.argv[1:3]
    print(json.dumps(main({"base": os.path.abspath(base), "new": os.path.abspath(new)}), indent=1))
