"""Run the real CLI as a user does (`python -m slime_hangdoctor ARGS`), for the integration tests."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Mapping

CLI = (sys.executable, "-m", "slime_hangdoctor")


def run_cli(
    *args: str, timeout: float = 60.0, env: Mapping[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], float]:
    """The finished process (text stdout/stderr) and its wall seconds; asserts nothing."""
    t0 = time.monotonic()
    proc = subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=dict(env) if env is not None else None,
    )
    return proc, time.monotonic() - t0


def run_cli_measured(
    *args: str, timeout: float = 120.0
) -> tuple[subprocess.CompletedProcess[str], float, int]:
    """`run_cli`, and the peak resident memory (bytes) of the CLI process: it runs under a fresh
    Python whose only child it is, so RUSAGE_CHILDREN is the CLI's alone. Past `timeout` the
    CLI is killed and the exit status is 124."""
    wrapper = (
        "import resource, subprocess, sys\n"
        "try:\n"
        "    p = subprocess.run(sys.argv[2:], capture_output=True, text=True,"
        " timeout=float(sys.argv[1]))\n"
        "    out, err, rc = p.stdout, p.stderr, p.returncode\n"
        "except subprocess.TimeoutExpired:\n"
        "    out, err, rc = '', 'timed out', 124\n"
        "sys.stdout.write(out)\n"
        "sys.stderr.write(err)\n"
        "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
        "sys.stderr.write(f'\\nPEAK_RSS_KIB={peak}\\n')\n"
        "sys.exit(rc)\n"
    )
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", wrapper, str(timeout), *CLI, *args],
        capture_output=True,
        text=True,
        timeout=timeout + 30,
        check=False,
    )
    wall = time.monotonic() - t0
    err, _, peak = proc.stderr.rpartition("\nPEAK_RSS_KIB=")
    proc.stderr = err
    return proc, wall, int(peak.strip()) * 1024
