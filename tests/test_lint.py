"""ruff and mypy are part of the test suite, so CI fails on a lint or type error."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)


def test_ruff_is_clean() -> None:
    """Style and common bugs: the whole tree passes `ruff check`, and the doctor's and the demo's
    packages `ruff format --check`."""
    check = _run(sys.executable, "-m", "ruff", "check", ".")
    assert check.returncode == 0, check.stdout + check.stderr
    fmt = _run(sys.executable, "-m", "ruff", "format", "--check", "slime_hangdoctor", "demo")
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr


def _mypy_demo_job() -> tuple[list[str], dict[str, str]]:
    """The demo slime job (its own `slime` package) is type-checked as its own root."""
    job = ROOT / "demo" / "slime_hangdoctor_demo" / "job"
    files = sorted(str(p.relative_to(ROOT)) for p in job.rglob("*.py"))
    cmd = [sys.executable, "-m", "mypy", "--strict", "--explicit-package-bases"]
    # a cache of its own: the two runs go at once, with other options
    cmd += ["--config-file", "/dev/null", "--cache-dir", ".mypy_cache/demo-job", *files]
    # the job imports the SGLang stand-in from the demo's package (demo/, where the job's
    # PYTHONPATH finds it at run time)
    return cmd, {**os.environ, "MYPYPATH": os.pathsep.join([str(job), str(job.parents[1])])}


@pytest.fixture(scope="module")
def mypy_runs() -> Iterator[dict[str, subprocess.Popen[str]]]:
    """Both mypy runs, started together (one core each: CI time), waited for by their tests."""
    job_cmd, job_env = _mypy_demo_job()
    runs = {
        "package": subprocess.Popen(
            [sys.executable, "-m", "mypy"], cwd=ROOT, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        ),
        "demo job": subprocess.Popen(
            job_cmd, cwd=ROOT, env=job_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True,
        ),
    }  # fmt: skip
    try:
        yield runs
    finally:
        for proc in runs.values():
            if proc.poll() is None:
                proc.kill()
                proc.communicate()


def _finished(proc: subprocess.Popen[str]) -> tuple[int, str]:
    out, err = proc.communicate(timeout=600)
    return proc.returncode, out[-5000:] + err[-2000:]


MAX_FUNCTION_LINES = 80


def test_no_function_of_the_package_is_over_80_lines() -> None:
    """Every function and method of the doctor's package fits in MAX_FUNCTION_LINES lines, from its
    `def` to the end of its body (ruff limits branches and statements, not lines)."""
    long: list[str] = []
    for path in sorted((ROOT / "slime_hangdoctor").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    where = path.relative_to(ROOT)
                    long.append(f"{where}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, "functions over 80 lines:\n" + "\n".join(long)


def test_mypy_strict_is_clean(mypy_runs: dict[str, subprocess.Popen[str]]) -> None:
    """Types: the doctor's package and the demo's (demo/, but for its job tree, checked below) pass
    mypy --strict (config in pyproject.toml)."""
    rc, text = _finished(mypy_runs["package"])
    assert rc == 0, text


def test_mypy_strict_is_clean_on_the_demo_job(mypy_runs: dict[str, subprocess.Popen[str]]) -> None:
    """The demo slime job (its own `slime` package) is type-checked too, as its own root."""
    rc, text = _finished(mypy_runs["demo job"])
    assert rc == 0, text
