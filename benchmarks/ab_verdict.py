"""Time to verdict of two or more versions of the doctor, alternately, against the same live job.

A regression budget ("no more than 0.5 s slower") cannot be read off two benchmark runs made at
different times on a shared box: the load moves the absolute figures by more than the budget. This
runs the CLI of each given tree (a checkout or `git worktree` of another commit, imported through
PYTHONPATH) in turn, RUNS times each, against one demo job per configuration of bench_verdict,
with bytecode cached as for an installed package (machine.cli_env), and prints the median wall
time and CPU (the CLI and its children) of each tree.

    git worktree add /tmp/base <commit>
    python -m benchmarks.ab_verdict base=/tmp/base head=. [--runs 5]

Not part of `benchmarks.run` (it needs other trees); its figures go to benchmarks/findings.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from benchmarks.bench_verdict import CONFIGS
from benchmarks.demo_job import running_demo
from benchmarks.machine import cli_env, load_snapshot
from benchmarks.measure import run_measured

RUNS = 5


def _trees(specs: list[str]) -> dict[str, Path]:
    trees: dict[str, Path] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not (Path(path) / "slime_hangdoctor" / "__init__.py").is_file():
            raise SystemExit(f"not NAME=TREE with a slime_hangdoctor package: {spec!r}")
        trees[name] = Path(path).resolve()
    return trees


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("trees", nargs="+", help="NAME=PATH of each tree, two or more")
    parser.add_argument("--runs", type=int, default=RUNS)
    args = parser.parse_args()
    trees = _trees(args.trees)
    for fault, extra in CONFIGS:
        with running_demo(fault, extra) as job:
            argv = [
                sys.executable,
                "-m",
                "slime_hangdoctor",
                "attach",
                job.dashboard_url,
                "--quiet",
            ]
            walls: dict[str, list[float]] = {name: [] for name in trees}
            cpus: dict[str, list[float]] = {name: [] for name in trees}
            for round_ in range(args.runs + 1):  # the first round warms each tree's caches
                for name, tree in trees.items():
                    env = {**cli_env(), "PYTHONPATH": str(tree)}
                    run = run_measured(argv, timeout=120, env=env, cwd=str(tree))
                    if run.rc not in (0, 1, 2):
                        raise SystemExit(f"{name}: exit {run.rc}\n{run.stderr[-2000:]}")
                    if round_:
                        walls[name].append(run.wall_s)
                        cpus[name].append(run.cpu_user_s + run.cpu_sys_s)
            print(f"{fault} {' '.join(extra)}: {load_snapshot()}")
            for name in trees:
                print(
                    f"  {name}: {statistics.median(walls[name]):.2f} s "
                    f"({min(walls[name]):.2f}-{max(walls[name]):.2f}), "
                    f"CPU {statistics.median(cpus[name]):.2f} s"
                )


if __name__ == "__main__":
    main()
