"""What the benchmarks ran on: the machine, the versions, and how busy the machine was."""

from __future__ import annotations

import atexit
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]


def hangdoctor_argv() -> list[str]:
    """The installed console script next to this Python (not a pyenv shim), else `python -m`."""
    script = Path(sys.executable).parent / "slime-hangdoctor"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-m", "slime_hangdoctor"]


_PYCACHE: list[str] = []


def cli_env() -> dict[str, str | None]:
    """The environment of a measured CLI run: bytecode cached, as in an installed package.

    pip byte-compiles a package when it installs it, and Python caches what it compiles; a
    `PYTHONDONTWRITEBYTECODE=1` environment (as in the sandbox these numbers come from) makes an
    editable install recompile all of its modules on every run (~0.1-0.2 s). The cache goes to a
    private temp dir (PYTHONPYCACHEPREFIX), removed when the benchmarks end, never into the tree."""
    if not _PYCACHE:
        cache = tempfile.mkdtemp(prefix="hd-bench-pycache-")
        atexit.register(shutil.rmtree, cache, ignore_errors=True)
        _PYCACHE.append(cache)
        _warm_up()
    return {"PYTHONDONTWRITEBYTECODE": None, "PYTHONPYCACHEPREFIX": _PYCACHE[0]}


def env_with(extra: dict[str, str | None]) -> dict[str, str]:
    """This process's environment with `extra` applied (None removes a variable)."""
    env = dict(os.environ)
    for key, value in extra.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def _warm_up() -> None:
    """Fill the bytecode cache (the CLI, collection, analysis and render modules) before timing."""
    fixture = REPO_ROOT / "tests" / "fixtures" / "bundles" / "gpu-2xh200-nccl-train-stuck"
    unreachable = (
        "http://127.0.0.1:9"  # refused at once: imports the collection path, probes nothing
    )
    for args in (
        ["--help"],
        ["analyse", str(fixture)],
        ["attach", unreachable, "--timeout", "2", "--quiet"],
    ):
        subprocess.run(
            [*hangdoctor_argv(), *args],
            capture_output=True,
            timeout=120,
            check=False,
            env=env_with({"PYTHONDONTWRITEBYTECODE": None, "PYTHONPYCACHEPREFIX": _PYCACHE[0]}),
        )


def pyspy_path() -> str:
    """The py-spy the product uses (PATH first, then next to this Python)."""
    from slime_hangdoctor.collect.pyspy import find_pyspy

    found = find_pyspy()
    if found is None:
        raise RuntimeError("py-spy is not installed")
    return found


def _version_of(argv: list[str]) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({exc})"
    return (out.stdout or out.stderr).strip().splitlines()[0] if (out.stdout or out.stderr) else ""


def package_version(name: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def _mem_total_gib() -> float:
    import psutil

    return round(psutil.virtual_memory().total / 2**30, 1)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def load_snapshot() -> dict[str, Any]:
    """Load average and the number of processes: other work on a shared machine skews timings."""
    import psutil

    one, five, fifteen = os.getloadavg()
    ray_workers = 0
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info.get("cmdline") or []
        if cmd and str(cmd[0]).startswith(("ray::", "sglang::")):
            ray_workers += 1
    return {
        "loadavg": [round(one, 2), round(five, 2), round(fifteen, 2)],
        "processes": len(psutil.pids()),
        "ray_or_sglang_titled_processes": ray_workers,
    }


def describe() -> dict[str, Any]:
    """The machine and the versions of everything that takes part in the numbers."""
    import slime_hangdoctor

    git = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    ).stdout.strip()
    return {
        "nproc": os.cpu_count(),
        "cpu": _cpu_model(),
        "ram_gib": _mem_total_gib(),
        "kernel": platform.release(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "ray": package_version("ray"),
        "py-spy": _version_of([pyspy_path(), "--version"]),
        "psutil": package_version("psutil"),
        "typer": package_version("typer"),
        "rich": package_version("rich"),
        "slime-hangdoctor": slime_hangdoctor.__version__,
        "git": f"{git}{' + uncommitted changes' if dirty else ''}",
        "cli": " ".join(hangdoctor_argv()),
    }
