"""Time to verdict of two or more versions of the doctor, alternately, against the same live job,
for every address form users type.

A regression budget ("no more than 0.5 s slower") cannot be read off two benchmark runs made at
different times on a shared box: the load moves the absolute figures by more than the budget. This
runs the CLI of each given tree (a checkout or `git archive` of another commit, imported through
PYTHONPATH) in turn, RUNS times each, against one demo job per fault, with bytecode cached as for
an installed package (machine.cli_env), and prints the median and worst wall time minus the window
and the CPU (the CLI and its children) of each tree, for each address form (issue 36):

- `gcs`: the GCS address `host:port` (as `head:6379`, `RAY_ADDRESS` give it);
- `url`: the dashboard's URL;
- `local`: no address at all: the local cluster (the demo head's Ray temp dir as `RAY_TMPDIR`, as
  Ray's own `ray_current_cluster` discovery finds it).

    git archive <commit> | tar -x -C /tmp/base
    python -m benchmarks.ab_verdict base=/tmp/base head=. [--runs 5] [--phase-runs 3]
        [--faults a,b,c] [--forms gcs,url,local] [--format text|json] [--save NAME]

Then PHASE_RUNS more runs of each tree and form with `--json --out`, whose manifests say where each
run's time went (benchmarks.timeline: process start to the first probe, discovery, first sample,
the window's idle wait, second sample, analysis, report and exit), printed per run and as medians.
`--faults` default: the demo's default job and `startup_engine_warmup_stuck`, whose engine holds a
`/health_generate` in flight (its warm-up never returns), the shape the issue's worst runs had.

Not part of `benchmarks.run` (it needs other trees); `--save NAME` writes every figure to
benchmarks/results/NAME.json; the tables go to docs/performance.md by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.demo_job import DemoJob, running_demo
from benchmarks.machine import cli_env, load_snapshot
from benchmarks.measure import run_measured
from benchmarks.timeline import load_manifest, phases

RUNS = 5
PHASE_RUNS = 3
WINDOW_S = 3.0  # attach's default --window
FORMS = ("gcs", "url", "local")
FAULTS = ("weight_sync_engine_missing", "startup_engine_warmup_stuck")
RESULTS = Path(__file__).parent / "results"


def _trees(specs: list[str]) -> dict[str, Path]:
    trees: dict[str, Path] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not (Path(path) / "slime_hangdoctor" / "__init__.py").is_file():
            raise SystemExit(f"not NAME=TREE with a slime_hangdoctor package: {spec!r}")
        trees[name] = Path(path).resolve()
    return trees


def form_argv(job: DemoJob, form: str) -> tuple[list[str], dict[str, str | None]]:
    """(the address arguments, the environment) of one address form against `job`."""
    unset: dict[str, str | None] = {"RAY_ADDRESS": None, "RAY_API_SERVER_ADDRESS": None}
    if form == "gcs":
        return [job.gcs_address], unset
    if form == "url":
        return [job.dashboard_url], unset
    if form == "local":
        return [], {**unset, "RAY_TMPDIR": str(job.ray_tmpdir)}
    raise SystemExit(f"unknown address form {form!r} (known: {', '.join(FORMS)})")


def _run(
    tree: Path, job: DemoJob, form: str, extra: list[str], fmt: str
) -> tuple[Any, dict[str, Any]]:
    address, env = form_argv(job, form)
    argv = [sys.executable, "-m", "slime_hangdoctor", "attach", *address]
    argv += ["--json"] if fmt == "json" else ["--quiet"]
    # the tree first, before what the environment already puts on the path (where the doctor's
    # dependencies were installed with --target, as on a lent machine)
    path = os.pathsep.join(p for p in (str(tree), os.environ.get("PYTHONPATH", "")) if p)
    run = run_measured(
        [*argv, *extra], timeout=120, env={**cli_env(), **env, "PYTHONPATH": path}, cwd=str(tree)
    )
    if run.rc not in (0, 1, 2):  # no verdict (3: Ray unreachable in time): counted, shown
        print(f"    {tree.name} {form}: exit {run.rc}: {run.stderr.strip()[-300:]}", flush=True)
    try:
        verdict = json.loads(run.stdout) if fmt == "json" else {}
    except ValueError:
        verdict = {}
    return run, verdict


def measure_fault(
    job: DemoJob,
    trees: dict[str, Path],
    forms: tuple[str, ...],
    runs: int,
    phase_runs: int,
    fmt: str,
) -> dict[str, Any]:
    """Every tree and form against one live job: walls (alternating) then phases (--out)."""
    walls: dict[tuple[str, str], list[float]] = {(f, t): [] for f in forms for t in trees}
    cpus: dict[tuple[str, str], list[float]] = {(f, t): [] for f in forms for t in trees}
    exits: dict[tuple[str, str], list[int]] = {(f, t): [] for f in forms for t in trees}
    for round_ in range(runs + 1):  # the first round warms each tree's caches
        for form in forms:
            for name, tree in trees.items():
                run, _ = _run(tree, job, form, [], fmt)
                if round_:
                    walls[form, name].append(run.wall_s)
                    cpus[form, name].append(run.cpu_s)
                    exits[form, name].append(run.rc)
    timelines: dict[tuple[str, str], list[dict[str, float]]] = {k: [] for k in walls}
    with tempfile.TemporaryDirectory(prefix="hd-ab-") as tmp:
        for i in range(phase_runs):
            for form in forms:
                for name, tree in trees.items():
                    out = Path(tmp) / f"{form}-{name}-{i}"
                    run, verdict = _run(tree, job, form, ["--out", str(out)], "json")
                    if not (out / "manifest.json").is_file():
                        continue
                    timelines[form, name].append(
                        phases(
                            load_manifest(out),
                            launched_at=run.launched_at,
                            exited_at=run.exited_at,
                            verdict_elapsed_s=float(verdict.get("elapsed_s") or 0.0) or None,
                        )
                    )
    result: dict[str, Any] = {"load": load_snapshot(), "forms": {}}
    for form in forms:
        for name in trees:
            over = [w - WINDOW_S for w in walls[form, name]]
            keys = timelines[form, name][0].keys() if timelines[form, name] else []
            result["forms"].setdefault(form, {})[name] = {
                "over_window_median_s": round(statistics.median(over), 3),
                "over_window_worst_s": round(max(over), 3),
                "over_window_runs_s": [round(o, 3) for o in over],
                "exit_codes": exits[form, name],
                "cpu_median_s": round(statistics.median(cpus[form, name]), 3),
                "phases_median_s": {
                    k: round(statistics.median(t[k] for t in timelines[form, name]), 3)
                    for k in keys
                },
                "phases_runs": timelines[form, name],
            }
    return result


PHASES_SHOWN = (
    "first_probe",
    "discovery",
    "sample0",
    "window_wait",
    "sample1",
    "analysis",
    "render_exit",
)


def print_fault(fault: str, result: dict[str, Any]) -> None:
    print(f"{fault}: {result['load']}")
    for form, by_tree in result["forms"].items():
        for name, r in by_tree.items():
            ph = r["phases_median_s"] or {}
            shown = " ".join(f"{k}={ph[k]:.2f}" for k in PHASES_SHOWN if k in ph)
            failed = sum(1 for rc in r["exit_codes"] if rc not in (0, 1, 2))
            print(
                f"  {form:5s} {name}: window + {r['over_window_median_s']:.2f} s median, "
                f"+ {r['over_window_worst_s']:.2f} s worst (n={len(r['over_window_runs_s'])}"
                f"{f', {failed} without a verdict' if failed else ''}), "
                f"CPU {r['cpu_median_s']:.2f} s; phases (median of "
                f"{len(r['phases_runs'])}): {shown}",
                flush=True,
            )
            for i, run in enumerate(r["phases_runs"]):
                print(
                    f"      run {i + 1}: "
                    + " ".join(f"{k}={run.get(k, float('nan')):.2f}" for k in PHASES_SHOWN),
                    flush=True,
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("trees", nargs="+", help="NAME=PATH of each tree, one or more")
    parser.add_argument("--runs", type=int, default=RUNS)
    parser.add_argument("--phase-runs", type=int, default=PHASE_RUNS)
    parser.add_argument("--faults", default=",".join(FAULTS), help="demo faults, comma-separated")
    parser.add_argument("--forms", default=",".join(FORMS), help="address forms: gcs,url,local")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument("--save", default="", help="write the figures to results/NAME.json")
    args = parser.parse_args()
    trees = _trees(args.trees)
    forms = tuple(f for f in args.forms.split(",") if f)
    everything: dict[str, Any] = {
        "trees": {k: str(v) for k, v in trees.items()},
        "runs": args.runs,
        "format": args.format,
        "faults": {},
    }
    for fault in (f for f in args.faults.split(",") if f):
        with running_demo(fault) as job:
            result = measure_fault(job, trees, forms, args.runs, args.phase_runs, args.format)
        print_fault(fault, result)
        everything["faults"][fault] = result
        if args.save:
            RESULTS.mkdir(parents=True, exist_ok=True)
            (RESULTS / f"{args.save}.json").write_text(json.dumps(everything, indent=1))


if __name__ == "__main__":
    main()
