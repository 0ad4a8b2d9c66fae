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
