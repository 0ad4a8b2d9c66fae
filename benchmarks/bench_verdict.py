"""Target 1: time to verdict of `slime-hangdoctor attach` on the demo cluster, with its breakdown.

For each demo configuration: `attach URL` run RUNS times as the on-call engineer runs it (text
report, default --window 3), timed from fork to exit (the headline: target window + 2 s); then RUNS
more with `--out DIR` to keep the bundle, whose manifest gives the breakdown (see timeline.py),
and whose analysis and rendering are timed again in a fresh interpreter (analyse_timing.py). Those
runs also write DIR.tar.gz, which the headline runs do not.

Standalone: ``python -m benchmarks.bench_verdict``.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.demo_job import DemoJob, running_demo
from benchmarks.machine import REPO_ROOT, cli_env, env_with, hangdoctor_argv, load_snapshot
from benchmarks.measure import run_measured, summary
from benchmarks.timeline import load_manifest, phases, probe_kinds, stack_targets

RUNS = 3
WINDOW_S = 3.0  # attach's default
BUDGET_OVER_WINDOW_S = 2.0
CONFIGS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("weight_sync_engine_missing", ()),  # the demo default: 12 processes, one scheduler stuck
    ("train_rank_stuck", ("--rollout-num-gpus", "3")),  # 16 processes, engines answer, rank 1 spins
)


def time_analysis(bundle: Path) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.analyse_timing", str(bundle)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO_ROOT,
        env=env_with(cli_env()),
        check=True,
    )
    result: dict[str, float] = json.loads(out.stdout)
    return result


def measure_attach(job: DemoJob, runs: int = RUNS) -> dict[str, Any]:
    """Headline and breakdown runs of `attach` against one running demo job."""
    argv = [*hangdoctor_argv(), "attach", job.dashboard_url, "--quiet"]
    plain = [run_measured(argv, timeout=120, env=cli_env()) for _ in range(runs)]
    breakdowns: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="hd-bench-attach-") as tmp:
        for i in range(runs):
            out = Path(tmp) / f"run{i}"
            m = run_measured([*argv, "--out", str(out)], timeout=120, env=cli_env())
            manifest = load_manifest(out)
            breakdowns.append(
                {
                    "wall_s": round(m.wall_s, 3),
                    "rc": m.rc,
                    "slime_processes": stack_targets(manifest, 0),
                    "phases": phases(manifest, launched_at=m.launched_at, exited_at=m.exited_at),
                    "probes": probe_kinds(manifest),
                    "analysis_render": time_analysis(out),
                }
            )
    walls = [m.wall_s for m in plain]
    median_wall = statistics.median(walls)
    budget = WINDOW_S + BUDGET_OVER_WINDOW_S
    return {
        "fault": job.fault,
        "extra_args": list(job.extra_args),
        "demo_processes": job.processes,
        "slime_processes": max(b["slime_processes"] for b in breakdowns),
        "exit_codes": [m.rc for m in plain],
        "wall_s": summary(walls),
        "budget_s": budget,
        "met": median_wall <= budget,
        "cli_peak_rss_mib": summary([m.peak_rss_mib for m in plain]),
        "cli_tree_peak_rss_mib": summary([m.peak_tree_rss_mib for m in plain]),
        "cli_cpu_s": summary([m.cpu_s for m in plain]),
        "breakdown_runs": breakdowns,
        "load": load_snapshot(),
    }


def run(
    shared: DemoJob | None = None,
    configs: tuple[tuple[str, tuple[str, ...]], ...] = CONFIGS,
) -> dict[str, Any]:
    """Every configuration of `configs`; `shared` (a running demo) serves the one it matches."""
    results = []
    for fault, extra in configs:
        if shared is not None and shared.fault == fault and shared.extra_args == extra:
            results.append(measure_attach(shared))
            continue
        with running_demo(fault, extra) as job:
            results.append(measure_attach(job))
    return {"configs": results}


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
