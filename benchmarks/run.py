"""Run every benchmark and write docs/performance.md.

    python -m benchmarks.run                       # all of them (~10 min on 2 cores)
    python -m benchmarks.run --only scale,startup  # some; the others keep their last results
    python -m benchmarks.run --label before-fixes  # store under another name, no report
    python -m benchmarks.run --report-only         # rewrite the report from the stored results

The report keeps every section of docs/performance.md it does not write itself (1a, 1b: A/Bs run
by hand on lent machines), each after the section it followed (`report.keep_sections`).

Results: benchmarks/results/<label>.json (default `latest`); the report compares `latest` with
`before-fixes` (the product before the performance fixes) when that file exists. Each benchmark
stops everything it starts (demo cluster, titled processes, temp dirs); a failing benchmark is
recorded as such and the others still run.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import (
    bench_pause,
    bench_ray_stack,
    bench_scale,
    bench_startup,
    bench_verdict,
    bench_watchdog,
    report,
)
from benchmarks.demo_job import DemoJob, running_demo
from benchmarks.machine import REPO_ROOT, describe, hangdoctor_argv, load_snapshot
from benchmarks.profile_attach import profile
from benchmarks.titled_procs import titled_processes

RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"
DOC = REPO_ROOT / "docs" / "performance.md"
ALL = ("startup", "pause", "scale", "verdict", "ray_stack", "watchdog")
DEMO_BENCHES = ("verdict", "ray_stack", "watchdog")


def _guard(name: str, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    print(f"[benchmarks] {name} ...", flush=True)
    t0 = time.monotonic()
    try:
        result = fn()
    except Exception as exc:  # one broken benchmark must not lose the others' numbers
        traceback.print_exc()
        result = {"error": f"{type(exc).__name__}: {exc}"}
    result["duration_s"] = round(time.monotonic() - t0, 1)
    print(f"[benchmarks] {name} done in {result['duration_s']}s", flush=True)
    return result


def _demo_benches(chosen: set[str], out: dict[str, Any]) -> None:
    """The benchmarks that share one running default demo job, then the other demo configs."""
    first, *others = bench_verdict.CONFIGS
    with running_demo(first[0], first[1]) as job:
        if "verdict" in chosen:
            out["verdict"] = _guard("verdict", lambda: _verdict_shared(job))
        if "ray_stack" in chosen:
            out["ray_stack"] = _guard("ray_stack", lambda: bench_ray_stack.run(job))
        if "watchdog" in chosen:
            out["watchdog"] = {
                "stalled": _guard("watchdog (stalled job)", lambda: bench_watchdog.run(job))
            }
            if not out["watchdog"]["stalled"].get("check", {}).get("met", True):
                out.setdefault("profiles", {})["check on a stalled job (CPU)"] = _guard(
                    "profile check", lambda: _profile_check(job)
                )
        verdict = out.get("verdict", {})
        if "verdict" in chosen and not all(c.get("met") for c in verdict.get("configs", [])):
            argv = [*hangdoctor_argv(), "attach", job.dashboard_url, "--quiet"]
            out.setdefault("profiles", {})["verdict"] = _guard(
                "profile attach", lambda: profile(argv)
            )
    if "watchdog" in chosen:
        out.setdefault("watchdog", {})["progressing"] = _guard(
            "watchdog (progressing job)", bench_watchdog.run_progressing
        )
    if "verdict" in chosen and others:
        more = _guard(
            "verdict (more demo configs)", lambda: bench_verdict.run(configs=tuple(others))
        )
        out["verdict"].setdefault("configs", []).extend(more.get("configs", []))


def _profile_check(job: DemoJob) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hd-bench-check-") as tmp:
        state = str(Path(tmp) / "state.json")
        argv = [*hangdoctor_argv(), "check", job.dashboard_url, "--state-file", state]
        return profile(argv, mode="cpu")


def _verdict_shared(job: DemoJob) -> dict[str, Any]:
    return {"configs": [bench_verdict.measure_attach(job)]}


def _scale_with_profile() -> dict[str, Any]:
    result = bench_scale.run()
    if not result.get("met"):
        largest = bench_scale.SIZES[-1]
        with titled_processes(largest):
            argv = [*hangdoctor_argv(), "attach", "--local", "--quiet"]
            result["profile"] = profile(argv)
    return result


def run(chosen: set[str]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "machine": describe(),
        "load_start": load_snapshot(),
    }
    t0 = time.monotonic()
    if "startup" in chosen:
        out["startup"] = _guard("startup", bench_startup.run)
    if "pause" in chosen:
        out["pause"] = _guard("pause", bench_pause.run)
    if "scale" in chosen:
        out["scale"] = _guard("scale", _scale_with_profile)
    if chosen & set(DEMO_BENCHES):
        try:
            _demo_benches(chosen, out)
        except Exception as exc:  # the demo would not start: record it for each
            traceback.print_exc()
            for name in chosen & set(DEMO_BENCHES):
                out.setdefault(name, {"error": f"demo job: {type(exc).__name__}: {exc}"})
    out["load_end"] = load_snapshot()
    out["duration_s"] = round(time.monotonic() - t0, 1)
    return out


def _merge(previous: dict[str, Any], new: dict[str, Any], chosen: set[str]) -> dict[str, Any]:
    """Results of a partial run on top of the stored ones (a benchmark not re-run keeps its own;
    the header keeps the full run's, and lists the partial re-runs)."""
    if not previous:
        return new
    merged = dict(previous)
    for key in chosen:
        if key in new:
            merged[key] = new[key]
    merged["reruns"] = [
        *previous.get("reruns", []),
        {"started": new.get("started"), "only": sorted(chosen), "git": new["machine"].get("git")},
    ]
    if "profiles" in new:
        merged["profiles"] = {**previous.get("profiles", {}), **new["profiles"]}
    return merged


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default=",".join(ALL), help=f"comma list of {', '.join(ALL)}")
    parser.add_argument(
        "--label", default="latest", help="results file name (no report unless latest)"
    )
    parser.add_argument(
        "--report-only", action="store_true", help="rewrite the report from the stored results"
    )
    args = parser.parse_args()
    chosen = {c.strip() for c in args.only.split(",") if c.strip()}
    unknown = chosen - set(ALL)
    if unknown:
        parser.error(f"unknown benchmarks: {', '.join(sorted(unknown))}")
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{args.label}.json"
    if args.report_only:
        results = json.loads(path.read_text())
    else:
        previous = json.loads(path.read_text()) if path.exists() and chosen != set(ALL) else {}
        results = _merge(previous, run(chosen), chosen)
        path.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
        print(f"[benchmarks] results: {path}")
    if args.label == "latest":
        baseline_path = RESULTS_DIR / "before-fixes.json"
        baseline = json.loads(baseline_path.read_text()) if baseline_path.exists() else None
        old = DOC.read_text() if DOC.exists() else ""
        DOC.write_text(report.keep_sections(old, report.render(results, baseline, RESULTS_DIR)))
        print(f"[benchmarks] report: {DOC}")


if __name__ == "__main__":
    main()
