"""Issue 45: does an engine of 4 TP ranks slow the collection? The same demo fault with 1 and with 4
TP ranks per engine, time to verdict of `attach` against each, in turns.

`--mode alternate` (default): both jobs run at once (two Ray heads, as the live pool runs two) and
the attach runs alternate between them, TP 1 then TP 4, RUNS times each: the box's load moves
both alike. `--mode rounds`: one job at a time, TP 1, then 4, then 1 again (A-B-A: a drift of the
box's load between jobs shows as a difference between the two A rounds). Each attach is
`attach URL --quiet --out DIR`; the figures are the wall time minus the window and the two
samples' spans (benchmarks.timeline.phases), median and worst. With 4 TP ranks the job has 6 more
scheduler processes (2 engines x 3 ranks) for py-spy and /proc.

    python -m benchmarks.bench_tp [--fault rollout_engine_stuck] [--runs 4] [--mode M] [--save NAME]

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


def _one(job: DemoJob, out: Path) -> tuple[float, float, float, int, int]:
    """One attach run: (wall - window, first sample, second sample, stack targets, exit code)."""
    argv = [*hangdoctor_argv(), "attach", job.dashboard_url, "--quiet", "--window", str(WINDOW_S)]
    m = run_measured([*argv, "--out", str(out)], timeout=120, env=cli_env())
    manifest = load_manifest(out)
    split = phases(manifest, launched_at=m.launched_at, exited_at=m.exited_at)
    return (
        m.wall_s - WINDOW_S,
        split["sample0"],
        split["sample1"],
        stack_targets(manifest, 0),
        m.rc,
    )


def measure(job: DemoJob, tp: int, runs: int) -> dict[str, Any]:
    """`runs` attach runs against `job`, each keeping its bundle for the breakdown."""
    with tempfile.TemporaryDirectory(prefix="hd-bench-tp-") as tmp:
        got = [_one(job, Path(tmp) / f"run{i}") for i in range(runs)]
    return _figures(job, tp, got)


def _figures(
    job: DemoJob, tp: int, got: list[tuple[float, float, float, int, int]]
) -> dict[str, Any]:
    over, first, second, targets, rcs = (list(col) for col in zip(*got, strict=True))
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


def alternate(fault: str, runs: int) -> dict[str, Any]:
    """Both jobs at once, the attach runs alternating between them."""
    with running_demo(fault, tp_size=1) as one, running_demo(fault, tp_size=4) as four:
        got: dict[int, list[tuple[float, float, float, int, int]]] = {1: [], 4: []}
        with tempfile.TemporaryDirectory(prefix="hd-bench-tp-") as tmp:
            for i in range(runs):
                for tp, job in ((1, one), (4, four)):
                    got[tp].append(_one(job, Path(tmp) / f"tp{tp}-run{i}"))
        rounds = [_figures(one, 1, got[1]), _figures(four, 4, got[4])]
    return {
        "mode": "alternate",
        "rounds": rounds,
        "tp4_minus_tp1_over_window_s": round(
            rounds[1]["over_window_s"]["median"] - rounds[0]["over_window_s"]["median"], 3
        ),
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
        "mode": "rounds",
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
    parser.add_argument("--mode", choices=("alternate", "rounds"), default="alternate")
    parser.add_argument("--save", default="")
    ns = parser.parse_args()
    result = alternate(ns.fault, ns.runs) if ns.mode == "alternate" else run(ns.fault, ns.runs)
    text = json.dumps(result, indent=2)
    if ns.save:
        (REPO_ROOT / "benchmarks" / "results" / f"{ns.save}.json").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
