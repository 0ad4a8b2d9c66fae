"""Target 3: scale on one node: 16, 64 and 128 target processes.

The targets are real Python processes titled like slime's Ray train workers (titled_procs.py),
blocked in a real call chain; `attach --local` finds them by their titles (no Ray needed), dumps
all their stacks twice and diagnoses. Measured per size: the wall time of the whole attach (target
at 128: window + 5 s), the wall time of each sample's stack collection (first dump start -> last
dump end, from the manifest) and the process scan. "Sub-linear" means the stack collection of 128
targets takes less than 8x (128/16) that of 16.

`--local` takes every slime-titled process on the node: on a machine shared with other jobs their
processes are targets too; the report gives the number actually dumped.

ROUNDS rounds over the sizes, in alternating order (16, 64, 128, then 128, 64, 16), so that a
change in the machine's load falls on all sizes. Per size and round: PLAIN_RUNS plain runs give the
attach wall time, CPU and memory; one more with `--out` gives the breakdown from its manifest (it
also writes the .tar.gz): the stack collection of both samples, per target too.

Standalone: ``python -m benchmarks.bench_scale``.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.machine import cli_env, hangdoctor_argv, load_snapshot
from benchmarks.measure import run_measured, summary
from benchmarks.timeline import load_manifest, phases, probe_kinds, stack_span, stack_targets
from benchmarks.titled_procs import titled_processes

SIZES = (16, 64, 128)
ROUNDS = 2
PLAIN_RUNS = 2
WINDOW_S = 3.0
BUDGET_OVER_WINDOW_S = 5.0


def _one_round(n: int, tmp: Path) -> tuple[list[Any], dict[str, Any]]:
    """With `n` titled workers up: PLAIN_RUNS plain runs and one --out run (the breakdown)."""
    argv = [*hangdoctor_argv(), "attach", "--local", "--quiet"]
    with titled_processes(n):
        plain = [run_measured(argv, timeout=180, env=cli_env()) for _ in range(PLAIN_RUNS)]
        out = tmp / f"bundle-{n}"
        m = run_measured([*argv, "--out", str(out)], timeout=180, env=cli_env())
        manifest = load_manifest(out)
        kinds = probe_kinds(manifest)
        breakdown = {
            "wall_s": round(m.wall_s, 3),
            "rc": m.rc,
            "targets": stack_targets(manifest, 0),
            "stack_s": [round(stack_span(manifest, s), 3) for s in (0, 1)],
            "process_scan_s": [kinds.get(f"processes[s{s}]", {}).get("span_s") for s in (0, 1)],
            "engine_probes": sum(v["count"] for k, v in kinds.items() if k.startswith("sglang")),
            "phases": phases(manifest, launched_at=m.launched_at, exited_at=m.exited_at),
            "load": load_snapshot(),
        }
        for path in (out, out.with_name(out.name + ".tar.gz")):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            elif path.exists():
                path.unlink()
    return plain, breakdown


def _size_result(n: int, plain: list[Any], breakdowns: list[dict[str, Any]]) -> dict[str, Any]:
    stacks = [s for b in breakdowns for s in b["stack_s"]]
    targets = [b["targets"] for b in breakdowns]
    return {
        "requested": n,
        "targets": summary(targets),
        "wall_s": summary([x.wall_s for x in plain]),
        "stack_s": summary(stacks),
        "ms_per_target": summary([1000 * s / t for b in breakdowns for s, t in _per(b)]),
        "process_scan_s": summary(
            [s for b in breakdowns for s in b["process_scan_s"] if s is not None]
        ),
        "cli_peak_rss_mib": summary([x.peak_rss_mib for x in plain]),
        "cli_cpu_s": summary([x.cpu_s for x in plain]),
        "runs": [
            {"wall_s": round(x.wall_s, 3), "rc": x.rc, "cpu_s": round(x.cpu_s, 3)} for x in plain
        ],
        "breakdowns": breakdowns,
        "breakdown": breakdowns[0],
        "load": breakdowns[-1]["load"],
    }


def _per(b: dict[str, Any]) -> list[tuple[float, int]]:
    return [(s, b["targets"]) for s in b["stack_s"] if b["targets"]]


def run(sizes: tuple[int, ...] = SIZES, rounds: int = ROUNDS) -> dict[str, Any]:
    """`rounds` rounds over all sizes, in alternating order, so that a change in the machine's
    load during the benchmark does not fall on one size only."""
    plain: dict[int, list[Any]] = {n: [] for n in sizes}
    breakdowns: dict[int, list[dict[str, Any]]] = {n: [] for n in sizes}
    with tempfile.TemporaryDirectory(prefix="hd-bench-scale-") as tmp:
        for r in range(rounds):
            for n in sizes if r % 2 == 0 else tuple(reversed(sizes)):
                p, b = _one_round(n, Path(tmp))
                plain[n].extend(p)
                breakdowns[n].append(b)
    results = [_size_result(n, plain[n], breakdowns[n]) for n in sizes]
    small, large = results[0], results[-1]
    growth = large["stack_s"]["median"] / small["stack_s"]["median"]
    size_ratio = large["targets"]["median"] / small["targets"]["median"]
    budget = WINDOW_S + BUDGET_OVER_WINDOW_S
    return {
        "sizes": results,
        "stack_growth": round(growth, 2),
        "target_growth": round(size_ratio, 2),
        "sublinear": growth < size_ratio,
        "budget_s": budget,
        "attach_at_largest_s": large["wall_s"]["median"],
        "met": growth < size_ratio and large["wall_s"]["median"] <= budget,
    }


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
