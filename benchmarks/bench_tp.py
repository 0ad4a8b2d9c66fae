"""Issue 45: does an engine of 4 TP ranks slow the collection? The same demo fault with 1 and with 4
TP ranks per engine, time to verdict of `attach` against each, in turns.

One demo job at a time (one Ray head on the box): the job with 1 TP rank, then the one with 4, then
1 again (A-B-A: a drift of the box's load between jobs shows as a difference between the two A
rounds). Each round runs `attach URL --quiet --out DIR` RUNS times; the figures are the wall time
minus the window and the two samples' spans (benchmarks.timeline.phases), median and worst. With
4 TP ranks the job has 6 more scheduler processes (2 engines x 3 ranks) for py-spy and /proc.

    python -m benchmarks.bench_tp [--fault rollout_engine_stuck] [--runs 4] [--save NAME]

Not part of `benchmarks.run`; the figures go to docs/performance.md by hand.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.demo_job import DemoJob, running_demo
from benchmarks.machine import REPO_ROOT, cli_env, hangdoctor_argv, load_snapshot
from benchmarks.measure import run_measured
from benchmarks.timeline import load_manifest, phases, stack_targets

RUNS = 4
WINDOW_S = 3.0
ROUNDS = (1, 4, 1)


def _stats(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 3), "max": round(max(values), 3)}


def measure(job: DemoJob, tp: int, runs: int) -> dict[str, Any]:
    """`runs` attach runs against `job`, each keeping its bundle for the breakdown."""
    argv = [*hangdoctor_argv(), "attach", job.dashboard_url, "--quiet", "--window", str(WINDOW_S)]
    over, first, second, targets, rcs = [], [], [], [], []
    with tempfile.TemporaryDirectory(prefix="hd-bench-tp-") as tmp:
        for i in range(runs):
            out = Path(tmp) / f"run{i}"
            m = run_measured([*argv, "--out", str(out)], timeout=120, env=cli_env())
            manifest = load_manifest(out)
            split = phases(manifest, launched_at=m.launched_at, exited_at=m.exited_at)
            over.append(m.wall_s - WINDOW_S)
            first.append(split["sample0"])
            second.append(split["sample1"])
            targets.append(stack_targets(manifest, 0))
            rcs.append(m.rc)
    return {
        "tp": tp,
        "fault": job.fault,
        "schedulers": sorted(k for k in job.processes if "scheduler" in k),
        "stack_targets": max(targets),
        "exit_codes": rcs,
        "over_window_s": _stats(over),
        "first_sample_s": _stats(first),
        "second_sample_s": _stats(second),
        "load": load_snapshot(),
    }


def run(fault: str, runs: int) -> dict[str, Any]:
    rounds = []
    for tp in ROUNDS:
        with running_demo(fault, tp_size=tp) as job:
            rounds.append(measure(job, tp, runs))
    ones = [r for r in rounds if r["tp"] == 1]
    fours = [r for r in rounds if r["tp"] == 4]
    base = statistics.mean(r["over_window_s"]["median"] for r in ones)
    return {
        "rounds": rounds,
        "tp4_minus_tp1_over_window_s": round(fours[0]["over_window_s"]["median"] - base, 3),
        "tp1_drift_s": round(
            ones[-1]["over_window_s"]["median"] - ones[0]["over_window_s"]["median"], 3
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--fault", default="rollout_engine_stuck")
    parser.add_argument("--runs", type=int, default=RUNS)
    parser.add_argument("--save", default="")
    ns = parser.parse_args()
    result = run(ns.fault, ns.runs)
    text = json.dumps(result, indent=2)
    if ns.save:
        (REPO_ROOT / "benchmarks" / "results" / f"{ns.save}.json").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
