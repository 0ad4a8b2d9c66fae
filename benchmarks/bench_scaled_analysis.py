"""The analysis and each report format against the job's size (issue 46 item 1).

A recorded hung job (the demo's `train_rank_stuck` bundle, tests/fixtures/analysis/demo) grown to
N nodes by `tests.fixtures.scaled.scaled_bundle`: each node 8 train ranks and a TP-8 engine, the
recorded stuck rank kept on node 0. Per N and run, in a fresh interpreter (so that peak RSS is
that run's): the analysis (`build_topology`, `diagnose` and the timeline, as `analyse` runs them
after loading), then each report format from its Diagnosis (text as rich lays it out for a
100-column console, json, markdown, html): wall and CPU time of each; peak RSS after the scaled
snapshot is built and at the end. Each run checks the verdict still names the recorded culprit.

    python -m benchmarks.bench_scaled_analysis [--nodes 1,8,32,64] [--runs 2] [--save NAME]
        [--base DIR] [--base-save NAME]

Results: benchmarks/results/NAME.json (default `scaled-analysis`); docs/performance.md section
3a and the summary are rendered from it (`python -m benchmarks.run --report-only`).

With `--base DIR` (a `git archive` of another commit), each size's run of this tree is followed
by the same run of that tree (imported through PYTHONPATH, its own benchmark's child: an A/B on
one machine, under the same load), saved as `--base-save` (default NAME-base).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.machine import REPO_ROOT, load_snapshot

RESULTS = REPO_ROOT / "benchmarks" / "results"
RECORDING = "train_rank_stuck"
RANK_PID, ENGINE_PID = 5981, 5881  # the recording's rank waiting on its peers; an engine actor
FORMATS = ("text", "json", "markdown", "html")
CHILD_TIMEOUT_S = 600


def _child(nodes: int) -> dict[str, Any]:
    """One run in this process: scale, analyse, render; figures as a dict."""
    import dataclasses
    import io
    import resource
    import tarfile
    import tempfile

    from rich.console import Console

    from slime_hangdoctor.analysis.diagnosis import diagnose
    from slime_hangdoctor.analysis.timeline import timeline
    from slime_hangdoctor.pipeline import analyse_bundle
    from slime_hangdoctor.render import render, render_text
    from slime_hangdoctor.topology import build_topology
    from tests.fixtures.scaled import scaled_bundle

    def peak_mib() -> float:
        return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)

    with tempfile.TemporaryDirectory(prefix="hd-scaled-") as tmp:
        archive = REPO_ROOT / "tests" / "fixtures" / "analysis" / "demo" / f"{RECORDING}.tar.gz"
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
        (bundle,) = [p.parent for p in Path(tmp).rglob("manifest.json")]
        recorded = analyse_bundle(bundle)
    assert recorded.snapshot is not None
    want = [(c.node_ip, c.pid) for c in recorded.diagnosis.verdict.culprits[:1]]
    snap = scaled_bundle(recorded.snapshot, nodes, rank_pid=RANK_PID, engine_pid=ENGINE_PID)
    out: dict[str, Any] = {
        "nodes": nodes,
        "processes": len(snap.processes_at(0)),
        "stacks": sum(1 for o in snap.observed if o.source == "pyspy"),
        "rss_before_mib": peak_mib(),
    }
    wall, cpu = time.perf_counter(), time.process_time()
    topo = build_topology(snap)
    diagnosis = dataclasses.replace(diagnose(snap, topo), timeline=timeline(snap))
    out["analysis"] = {
        "wall_s": round(time.perf_counter() - wall, 3),
        "cpu_s": round(time.process_time() - cpu, 3),
    }
    got = [(c.node_ip, c.pid) for c in diagnosis.verdict.culprits[:1]]
    out["culprit_named"] = got == want
    out["status"] = diagnosis.verdict.status.value
    for fmt in FORMATS:
        wall, cpu = time.perf_counter(), time.process_time()
        if fmt == "text":
            console = Console(file=io.StringIO(), width=100, force_terminal=False)
            render(diagnosis, fmt, console)
            size = len(console.file.getvalue())  # type: ignore[attr-defined]
        else:
            size = len(render_text(diagnosis, fmt))
        out[fmt] = {
            "wall_s": round(time.perf_counter() - wall, 3),
            "cpu_s": round(time.process_time() - cpu, 3),
            "bytes": size,
        }
    out["peak_rss_mib"] = peak_mib()
    return out


def _run_child(nodes: int, tree: Path = REPO_ROOT) -> dict[str, Any]:
    import os

    argv = [sys.executable, "-m", "benchmarks.bench_scaled_analysis", "--child", str(nodes)]
    env = dict(os.environ)
    if tree != REPO_ROOT:
        env["PYTHONPATH"] = f"{tree}:{tree / 'demo'}"
    try:
        done = subprocess.run(
            argv,
            check=False,
            capture_output=True,
            text=True,
            timeout=CHILD_TIMEOUT_S,
            cwd=tree,
            env=env,
        )
    except subprocess.TimeoutExpired:
        return {"nodes": nodes, "error": f"timed out after {CHILD_TIMEOUT_S} s"}
    if done.returncode != 0:
        return {"nodes": nodes, "error": done.stderr[-2000:]}
    parsed: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return parsed


def _median(runs: list[dict[str, Any]], *path: str) -> float:
    values = []
    for r in runs:
        v: Any = r
        for key in path:
            v = v[key]
        values.append(float(v))
    return round(statistics.median(values), 3)


def run(nodes: list[int], runs: int, base: Path | None = None) -> list[dict[str, Any]]:
    """This tree's results, and (with `base`) the base tree's, each size's runs alternating."""
    from benchmarks.machine import describe

    trees = [REPO_ROOT] if base is None else [REPO_ROOT, base]
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    load_start = load_snapshot()
    by_n: list[dict[int, list[dict[str, Any]]]] = [{n: [] for n in nodes} for _ in trees]
    for r in range(runs):  # rounds, alternating order: load drift falls on every size
        for n in nodes if r % 2 == 0 else list(reversed(nodes)):
            for tree in trees if r % 2 == 0 else trees[::-1]:
                index = trees.index(tree)
                print(f"[scaled] round {r + 1}: {n} nodes, {tree}", file=sys.stderr, flush=True)
                by_n[index][n].append(_run_child(n, tree))
    load_end = load_snapshot()
    out = []
    for tree, sizes in zip(trees, by_n, strict=True):
        machine = describe()
        if tree != REPO_ROOT:
            machine["git"] = _git_of(tree)
        result = {
            "started": started,
            "machine": machine,
            "recording": RECORDING,
            "load_start": load_start,
            "sizes": _sizes(nodes, sizes),
            "load_end": load_end,
        }
        if base is not None:
            result["alternated_with"] = str(base if tree == REPO_ROOT else REPO_ROOT)
        out.append(result)
    return out


def _git_of(tree: Path) -> str:
    """The commit a `git archive` tree was made from (its pax header), else the folder."""
    stamp = tree / ".git-commit"
    return stamp.read_text().strip()[:7] if stamp.exists() else str(tree)


def _sizes(nodes: list[int], by_n: dict[int, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for n in nodes:
        ok = [x for x in by_n[n] if "error" not in x]
        size: dict[str, Any] = {"nodes": n, "runs": by_n[n]}
        if ok:
            size["processes"] = ok[0]["processes"]
            size["culprit_named"] = all(x["culprit_named"] for x in ok)
            for part in ("analysis", *FORMATS):
                size[part] = {
                    "wall_s": _median(ok, part, "wall_s"),
                    "cpu_s": _median(ok, part, "cpu_s"),
                }
            size["html_bytes"] = ok[0]["html"]["bytes"]
            size["peak_rss_mib"] = _median(ok, "peak_rss_mib")
            size["rss_before_mib"] = _median(ok, "rss_before_mib")
        out.append(size)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", default="1,8,32,64")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--save", default="scaled-analysis")
    parser.add_argument("--base", type=Path, help="another tree to alternate with")
    parser.add_argument("--base-save", help="its results' name (default: NAME-base)")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(_child(args.child)))
        return
    results = run([int(n) for n in args.nodes.split(",")], args.runs, args.base)
    names = [args.save, args.base_save or f"{args.save}-base"]
    for name, result in zip(names, results, strict=False):
        path = RESULTS / f"{name}.json"
        path.write_text(json.dumps(result, indent=1) + "\n")
        print(f"[scaled] results: {path}")


if __name__ == "__main__":
    main()
