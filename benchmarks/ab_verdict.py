"""Time to verdict of two or more versions of the doctor, alternately, against the same live job.

A regression budget ("no more than 0.5 s slower") cannot be read off two benchmark runs made at
different times on a shared box: the load moves the absolute figures by more than the budget. This
runs the CLI of each given tree (a checkout or `git worktree` of another commit, imported through
PYTHONPATH) in turn, RUNS times each, against one demo job per configuration of bench_verdict,
with bytecode cached as for an installed package (machine.cli_env), and prints the median wall
time and CPU (the CLI and its children) of each tree.

    git worktree add /tmp/base <commit>
    python -m benchmarks.ab_verdict base=/tmp/base head=. [--runs 5] [--faults a,b,c]

Per fault and tree: the median and the worst wall time minus the window (issue 26's measure), the
CPU, and, from one more run with `--out`, the time from the process's start to its first probe.

Not part of `benchmarks.run` (it needs other trees); its figures go to benchmarks/findings.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
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
    parser.add_argument(
        "--faults", default="", help="demo faults, comma-separated (default: bench_verdict's)"
    )
    args = parser.parse_args()
    trees = _trees(args.trees)
    configs = tuple((f, ()) for f in args.faults.split(",") if f) if args.faults else CONFIGS
    for fault, extra in configs:
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
            with tempfile.TemporaryDirectory(prefix="hd-ab-") as tmp:
                firsts: dict[str, list[float]] = {name: [] for name in trees}
                for i in range(FIRST_PROBE_RUNS):
                    for name, tree in trees.items():
                        out = Path(tmp) / f"{name}-{i}"
                        firsts[name].append(_first_probe_s(argv, tree, out))
                first = {name: statistics.median(v) for name, v in firsts.items()}
            print(f"{fault} {' '.join(extra)}: {load_snapshot()}")
            for name in trees:
                over = [w - WINDOW_S for w in walls[name]]
                print(
                    f"  {name}: {statistics.median(walls[name]):.2f} s "
                    f"({min(walls[name]):.2f}-{max(walls[name]):.2f}), "
                    f"window + {statistics.median(over):.2f} s median, + {max(over):.2f} s worst, "
                    f"CPU {statistics.median(cpus[name]):.2f} s, "
                    f"start to first probe {first[name]:.2f} s (median of {FIRST_PROBE_RUNS}, "
                    f"{min(firsts[name]):.2f}-{max(firsts[name]):.2f})",
                    flush=True,
                )


WINDOW_S = 3.0  # attach's default --window
FIRST_PROBE_RUNS = 3  # runs with --out, whose manifest times the first probe (one alone is noisy)


def _first_probe_s(argv: list[str], tree: Path, out: Path) -> float:
    """Process start to the first probe of one run with --out (its manifest times every probe)."""
    env = {**cli_env(), "PYTHONPATH": str(tree)}
    run = run_measured([*argv, "--out", str(out)], timeout=120, env=env, cwd=str(tree))
    manifest = json.loads((out / "manifest.json").read_text())
    starts = [p["started_at"] for p in manifest["probes"] if p.get("started_at")]
    return min(starts) - run.launched_at if starts else float("nan")


if __name__ == "__main__":
    main()
