"""Target 5: start-up. `slime-hangdoctor --help` under 0.5 s: heavy modules are imported lazily.

Measured: the wall time of `--help` through the installed console script (RUNS times; the first
run, with cold caches, is reported apart), with the bytecode cache of an installed package
(machine.cli_env) and, for comparison, without it (PYTHONDONTWRITEBYTECODE=1), `python -X importtime` of the same for the slowest
imports, and which heavy modules (ray, psutil, requests, torch, pynvml, prometheus_client, grpc)
`--help` imports: none should be. The memory of the CLI during `attach` is in bench_verdict.

Also what an address's resolution imports (issue 36): the GCS's KV was read through Ray's
generated module, which imports the whole `ray` package; it is now read with grpc and protobuf's
runtime (collect/gcs_kv.py), and a GCS on this machine through its dashboard process, with
neither. `resolution_imports` times each in a fresh interpreter (IMPORT_RUNS, min and median).

Standalone: ``python -m benchmarks.bench_startup``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from typing import Any

from benchmarks.machine import REPO_ROOT, cli_env, env_with, hangdoctor_argv
from benchmarks.measure import run_measured, summary

RUNS = 10
TARGET_S = 0.5
# the architecture's lazy list (docs/architecture.md), plus grpc (Ray's); rich is reported, not judged
HEAVY = ("ray", "psutil", "requests", "torch", "pynvml", "prometheus_client", "grpc")
REPORTED = (*HEAVY, "rich")
_IMPORT_LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|(\s*)(\S+)")


def heavy_imported() -> list[str]:
    """Packages of REPORTED in sys.modules after `--help`."""
    code = (
        "import sys\n"
        "from slime_hangdoctor.cli import main\n"
        "try:\n"
        "    main(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print(' '.join(m for m in {REPORTED!r} if m in sys.modules), file=sys.stderr)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO_ROOT,
        env=env_with(cli_env()),
        check=False,
    )
    return out.stderr.strip().split() if out.stderr.strip() else []


def slowest_imports(limit: int = 8) -> list[dict[str, Any]]:
    """The slowest imports of `--help` (two levels deep) by cumulative time (-X importtime)."""
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "slime_hangdoctor", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO_ROOT,
        env=env_with(cli_env()),
        check=False,
    )
    rows = []
    for line in out.stderr.splitlines():
        m = _IMPORT_LINE.match(line)
        if m and len(m.group(3)) <= 3:  # two levels deep
            rows.append({"module": m.group(4), "cumulative_ms": round(int(m.group(2)) / 1000, 1)})
    rows.sort(key=lambda r: -float(r["cumulative_ms"]))
    return rows[:limit]


IMPORT_RUNS = 7
RESOLUTION_IMPORTS = {
    "ray's generated gcs_service_pb2 (the old path: all of ray)": (
        "from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc"
    ),
    "grpc": "import grpc",
    "protobuf's runtime and the KV messages (collect/gcs_kv.py)": (
        "from slime_hangdoctor.collect import gcs_kv; gcs_kv._messages()"
    ),
    "grpc + the KV messages (a GCS elsewhere)": (
        "import grpc; from slime_hangdoctor.collect import gcs_kv; gcs_kv._messages()"
    ),
    "msgpack (a node's answer)": "import msgpack",
}


def resolution_imports() -> dict[str, dict[str, float]]:
    """Seconds each import of RESOLUTION_IMPORTS takes in a fresh interpreter (min, median)."""
    out: dict[str, dict[str, float]] = {}
    for name, code in RESOLUTION_IMPORTS.items():
        times = []
        for _ in range(IMPORT_RUNS):
            proc = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    f"import time; t = time.perf_counter(); {code}; print(time.perf_counter() - t)",
                ],
                capture_output=True,
                text=True,
                timeout=60,
                cwd=REPO_ROOT,
                env=env_with(cli_env()),
                check=False,
            )
            if proc.returncode != 0:
                break
            times.append(float(proc.stdout.strip()))
        if times:
            out[name] = {
                "min_s": round(min(times), 3),
                "median_s": round(sorted(times)[len(times) // 2], 3),
            }
    return out


def run() -> dict[str, Any]:
    argv = [*hangdoctor_argv(), "--help"]
    runs = [run_measured(argv, timeout=60, env=cli_env()) for _ in range(RUNS + 1)]
    uncached = [
        run_measured(argv, timeout=60, env={"PYTHONDONTWRITEBYTECODE": "1"}) for _ in range(RUNS)
    ]
    first, rest = runs[0], runs[1:]
    walls = [m.wall_s for m in rest]
    median = sorted(walls)[len(walls) // 2]
    heavy = heavy_imported()
    return {
        "argv": argv,
        "first_run_s": round(first.wall_s, 3),
        "wall_s": summary(walls),
        "wall_s_without_bytecode_cache": summary([m.wall_s for m in uncached]),
        "peak_rss_mib": summary([m.peak_rss_mib for m in rest]),
        "heavy_modules_imported": heavy,
        "slowest_imports": slowest_imports(),
        "resolution_imports": resolution_imports(),
        "target_s": TARGET_S,
        "met": median < TARGET_S and not [m for m in heavy if m in HEAVY],
    }


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
