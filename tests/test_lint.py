"""ruff and mypy are part of the test suite, so CI fails on a lint or type error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)


def test_ruff_is_clean() -> None:
    """Style and common bugs: the whole tree passes `ruff check` and `ruff format --check`."""
    check = _run(sys.executable, "-m", "ruff", "check", ".")
    assert check.returncode == 0, check.stdout + check.stderr
    fmt = _run(sys.executable, "-m", "ruff", "format", "--check", "slime_hangdoctor")
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr


def test_mypy_strict_is_clean() -> None:
    """Types: the package passes mypy --strict (config in pyproject.toml)."""
    result = _run(sys.executable, "-m", "mypy")
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]


def test_mypy_strict_is_clean_on_the_demo_job() -> None:
    """The demo slime job (its own `slime` package) is type-checked too, as its own root."""
    job = ROOT / "slime_hangdoctor" / "demo" / "job"
    files = sorted(str(p.relative_to(ROOT)) for p in job.rglob("*.py"))
    env_cmd = (
        sys.executable,
        "-m",
        "mypy",
        "--strict",
        "--explicit-package-bases",
        "--config-file",
        "/dev/null",
        *files,
    )
    result = subprocess.run(
        env_cmd,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**__import__("os").environ, "MYPYPATH": str(job)},
    )
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
