"""Debian tools a test needs (Graphviz's dot, headless Chromium, promtool): found on PATH, else
installed with apt-get where the test runs as root on a Debian-like machine (CI is one), else the
test is skipped with the reason printed, never silently.

The install runs once per package and session; what it cost is printed (stderr, shown with -s or
in the captured output of the test), so the CI time it adds is seen.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import time

import pytest

APT_TIMEOUT_S = 600


@functools.cache
def _apt_updated() -> str | None:
    """`apt-get update`, once: None when it worked, else why not."""
    try:
        done = subprocess.run(
            ["apt-get", "update", "-qq"],
            capture_output=True,
            text=True,
            timeout=APT_TIMEOUT_S,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"apt-get update failed: {exc}"
    return None if done.returncode == 0 else f"apt-get update failed: {done.stderr[-300:]}"


@functools.cache
def _install(package: str) -> str | None:
    """apt-get install `package`: None when it worked, else why not."""
    if os.geteuid() != 0:
        return "not root, so apt-get cannot install it"
    if shutil.which("apt-get") is None:
        return "no apt-get on this machine (not Debian-like)"
    started = time.monotonic()
    why = _apt_updated()
    if why is not None:
        return why
    try:
        done = subprocess.run(
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends", package],
            capture_output=True,
            text=True,
            timeout=APT_TIMEOUT_S,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"apt-get install {package} failed: {exc}"
    if done.returncode != 0:
        return f"apt-get install {package} failed: {done.stderr[-300:]}"
    print(
        f"[debian_tools] apt-get install {package}: {time.monotonic() - started:.1f} s",
        file=sys.stderr,
    )
    return None


def require_tool(binary: str, package: str) -> str:
    """The path of `binary`, installing Debian's `package` if needed; skips the test (with the
    reason, printed) where neither works."""
    found = shutil.which(binary)
    if found is not None:
        return found
    why = _install(package)
    found = shutil.which(binary)
    if found is None:
        reason = f"{binary} (Debian package {package}) is not available: {why or 'not on PATH'}"
        print(f"[debian_tools] SKIP: {reason}", file=sys.stderr)
        pytest.skip(reason)
    return found
