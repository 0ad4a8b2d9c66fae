"""The CLI's start-up on two typer versions (issue 42 item 7: the `typer<0.29` bound dropped,
its cost measured instead of pinned).

For each typer (the environment's own, and any `--site DIR` holding another one, put first on
PYTHONPATH: `pip install --target DIR typer==X`), alternately, RUNS times each:

- `slime-hangdoctor --help`: the wall time of the whole process;
- a `check`-like start: `main(["check", "--local", ...])` with the watchdog's `run_check`
  replaced by an immediate exit, so the time is the interpreter, the imports, building the
  command and parsing and coercing every option, up to the call (what every cron `check` pays
  before it looks at the job);
- `-X importtime` of the same `check` start: the cumulative import time of typer and of pydantic
  (typer 0.29 coerces options through it), and whether pydantic is imported at all.

Standalone: ``python -m benchmarks.bench_typer_start [--site DIR ...]``; prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import time
from typing import Any

from benchmarks.machine import REPO_ROOT, cli_env, env_with

RUNS = 15  # per configuration, alternately
CHECK_ARGS = ["check", "--local", "--window", "0", "--stall-after", "10m", "--json"]
CHECK_START = (
    "import sys\n"
    "from unittest import mock\n"
    "from slime_hangdoctor.watchdog import run\n"
    "from slime_hangdoctor import cli\n"
    "def called(*a, **k):\n"
    "    raise SystemExit(0)\n"
    "with mock.patch.object(run, 'run_check', called):\n"
    "    sys.exit(cli.main(sys.argv[1:]))\n"
)
HELP = "import sys; from slime_hangdoctor.cli import main; sys.exit(main(['--help']))"
_IMPORT = re.compile(r"import time:\s+\d+ \|\s+(\d+) \|\s*(\S+)$")


def _env(site: str | None) -> dict[str, str]:
    path = [p for p in (site, str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p]
    return env_with({**cli_env(), "PYTHONPATH": os.pathsep.join(path)})


def _wall(code: str, args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system) of one run. The CPU time is what the start costs
    the machine; on a loaded machine it moves less than the wall time, which includes waiting."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", code, *args], env=env, cwd=REPO_ROOT, capture_output=True,
        timeout=60, check=True,
    )  # fmt: skip
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _imports(env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", CHECK_START, *CHECK_ARGS], env=env,
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    top: dict[str, int] = {}
    for line in done.stderr.splitlines():
        m = _IMPORT.match(line)
        if m and m.group(2) in ("typer", "pydantic", "rich", "click", "slime_hangdoctor.cli"):
            top[m.group(2)] = max(top.get(m.group(2), 0), int(m.group(1)))
    return {f"{k}_ms": round(v / 1000, 1) for k, v in sorted(top.items())}


def _version(env: dict[str, str]) -> str:
    code = "import typer; print(typer.__version__)"
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()


def _median(xs: list[float]) -> float:
    return round(sorted(xs)[len(xs) // 2], 3)


def _stats(runs: list[tuple[float, float]]) -> dict[str, float]:
    walls, cpus = [w for w, _ in runs], [c for _, c in runs]
    return {
        "wall_median_s": _median(walls),
        "wall_min_s": round(min(walls), 3),
        "cpu_median_s": _median(cpus),
        "cpu_min_s": round(min(cpus), 3),
    }


def run(sites: list[str | None]) -> dict[str, Any]:
    envs = {site: _env(site) for site in sites}
    for env in envs.values():  # warm the bytecode cache and the page cache
        _wall(HELP, [], env)
        _wall(CHECK_START, CHECK_ARGS, env)
    helps: dict[str | None, list[tuple[float, float]]] = {s: [] for s in sites}
    checks: dict[str | None, list[tuple[float, float]]] = {s: [] for s in sites}
    for _ in range(RUNS):  # alternately, so that the machine's load falls on both alike
        for site, env in envs.items():
            helps[site].append(_wall(HELP, [], env))
            checks[site].append(_wall(CHECK_START, CHECK_ARGS, env))
    out = []
    for site, env in envs.items():
        out.append({
            "site": site or "(the environment's)",
            "typer": _version(env),
            "help": _stats(helps[site]),
            "check_start": _stats(checks[site]),
            "check_imports": _imports(env),
        })  # fmt: skip
    load = [round(x, 2) for x in os.getloadavg()]
    return {"runs": RUNS, "cpus": os.cpu_count(), "load_average": load, "results": out}


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--site", action="append", default=[])
    ns = parser.parse_args()
    print(json.dumps(run([None, *ns.site]), indent=1))
