"""The one-process order of tests/conftest.py, on a real pytest run of a small project laid out as
the suite is (tests/unit, tests/integration, tests/reliability, tests/test_lint.py) whose conftest
is the suite's own hook: the unit tests and the linters first (beside the live pool), then the live
tests, then the rest; a unit test that changes what the whole process shares runs after the pool."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CONFTEST = """
from tests.conftest import pytest_collection_modifyitems
"""
INI = """[pytest]
markers =
    live(name): a live scenario
    ray: starts a Ray head
    process_wide: changes what the whole process shares
"""
UNIT = """
import pytest

def test_plain():
    pass

def test_patches(monkeypatch):
    monkeypatch.setenv("X", "1")

def test_prints(capfd):
    pass

@pytest.mark.process_wide
def test_umask():
    pass

@pytest.mark.ray
def test_head():
    pass

def test_plain_too():
    pass
"""
LIVE = """
import pytest

@pytest.mark.live("x")
def test_live_a():
    pass

def test_not_live():
    pass

@pytest.mark.live("y")
def test_live_b():
    pass
"""
PLAIN = """
def test_plain():
    pass
"""


def _order(proj: Path, *args: str) -> list[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "demo"), str(proj)]),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=proj,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [line for line in proc.stdout.splitlines() if "::" in line]


def _project(tmp_path: Path) -> Path:
    proj = tmp_path / "proj"
    files = {
        "conftest.py": CONFTEST,
        "pytest.ini": INI,
        "tests/integration/test_demo.py": LIVE,
        "tests/reliability/test_hostile.py": PLAIN,
        "tests/test_lint.py": PLAIN,
        "tests/unit/test_parse.py": UNIT,
    }
    for name, text in files.items():
        (proj / name).parent.mkdir(parents=True, exist_ok=True)
        (proj / name).write_text(text, encoding="utf-8")
    return proj


def test_unit_tests_and_linters_first_then_the_live_ones_then_the_rest(tmp_path: Path) -> None:
    got = _order(_project(tmp_path), "-p", "no:xdist")
    assert got == [
        "tests/test_lint.py::test_plain",
        "tests/unit/test_parse.py::test_plain",
        "tests/unit/test_parse.py::test_plain_too",
        "tests/integration/test_demo.py::test_live_a",
        "tests/integration/test_demo.py::test_live_b",
        "tests/integration/test_demo.py::test_not_live",
        "tests/reliability/test_hostile.py::test_plain",
        "tests/unit/test_parse.py::test_patches",
        "tests/unit/test_parse.py::test_prints",
        "tests/unit/test_parse.py::test_umask",
        "tests/unit/test_parse.py::test_head",
    ], got


def test_without_live_tests_the_order_is_pytests_own(tmp_path: Path) -> None:
    got = _order(_project(tmp_path), "-p", "no:xdist", "-m", "not live")
    assert got == [
        "tests/integration/test_demo.py::test_not_live",
        "tests/reliability/test_hostile.py::test_plain",
        "tests/test_lint.py::test_plain",
        "tests/unit/test_parse.py::test_plain",
        "tests/unit/test_parse.py::test_patches",
        "tests/unit/test_parse.py::test_prints",
        "tests/unit/test_parse.py::test_umask",
        "tests/unit/test_parse.py::test_head",
        "tests/unit/test_parse.py::test_plain_too",
    ], got
