"""ruff, mypy and deptry are part of the test suite, so CI fails on a lint or type error or on an
import of a distribution the project does not declare."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
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


# deptry over the three scopes that declare dependencies (config in pyproject.toml [tool.deptry]):
# the repository's code (doctor, tests, scripts, benchmarks) against every extra (`bench`: the
# soak's plot); the doctor's package alone against its runtime dependencies (an import of a test,
# dev or bench extra there is DEP004);
# the demo's distribution (demo/) against its own pyproject.toml.
_DEV_EXTRAS = ("-oddg", "test,dev,monitoring,bench")
# (--known-first-party replaces the configured list: the demo's package, optional, is named again)
_FIRST_PARTY = ("-kf", "slime_hangdoctor", "-kf", "slime_hangdoctor_demo")
_PRODUCT = ("slime_hangdoctor", *_DEV_EXTRAS, *_FIRST_PARTY)


def _deptry(cwd: Path, *args: str) -> tuple[int, str, list[dict[str, object]]]:
    """Run deptry in `cwd` with `args`; its exit code, output and the issues it found (JSON)."""
    with tempfile.TemporaryDirectory(prefix="hd-deptry-") as tmp:
        out = Path(tmp) / "issues.json"
        cmd = [sys.executable, "-m", "deptry", *args, "--no-ansi", "-o", str(out)]
        proc = subprocess.run(
            cmd, cwd=cwd, capture_output=True, text=True, timeout=300, check=False
        )
        issues = json.loads(out.read_text(encoding="utf-8")) if out.exists() else []
    return proc.returncode, proc.stdout + proc.stderr, issues


@pytest.mark.parametrize(
    ("where", "args"),
    [("repository", (".",)), ("package", _PRODUCT), ("demo", (".",))],
)
def test_imports_are_declared_dependencies(where: str, args: tuple[str, ...]) -> None:
    """Every import resolves to a declared distribution (not one that only arrives through
    another, as msgpack, grpcio and protobuf did through ray[default]) and every runtime dependency
    is used."""
    rc, text, issues = _deptry(ROOT / "demo" if where == "demo" else ROOT, *args)
    assert rc == 0 and not issues, text


def test_deptry_refuses_an_undeclared_or_test_only_import(tmp_path: Path) -> None:
    """The check can fail: in a copy of the project's configuration, the package importing a
    distribution declared nowhere (DEP001), one only a dependency brings (DEP003) and one of the
    test extra (DEP004) is refused, each by its rule."""
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    pkg = tmp_path / "slime_hangdoctor"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("", encoding="utf-8")
    (pkg / "stray.py").write_text(
        "import hd_no_such_distribution\nimport aiosignal\nimport yaml\n", encoding="utf-8"
    )
    rc, text, issues = _deptry(tmp_path, *_PRODUCT)
    found = {(i["module"], i["error"]["code"]) for i in issues}  # type: ignore[index]
    assert rc != 0, text
    assert {
        ("hd_no_such_distribution", "DEP001"),
        ("aiosignal", "DEP003"),
        ("yaml", "DEP004"),
    } <= found, text
