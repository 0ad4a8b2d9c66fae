"""tests/xdist_plan.py on a real pytest-xdist run of two workers: a small project whose conftest is
the suite's own hooks, with live tests, Ray tests and two plain modules, each test writing when it
ran on which worker. The live tests run first, on one worker, and no other test starts before the
last of them ends; the Ray tests run on one worker; a module's tests stay on one worker."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("xdist")

ROOT = Path(__file__).resolve().parents[2]

CONFTEST = """
from tests.conftest import pytest_cmdline_main, pytest_collection_modifyitems, pytest_configure
"""
INI = """[pytest]
markers =
    live(name): a live scenario
    ray: starts a Ray head
"""
LOG = """
import os, time

def ran(what):
    with open(os.environ["PLAN_LOG"], "a") as fh:
        fh.write(f"{time.monotonic():.3f} {os.environ['PYTEST_XDIST_WORKER']} {what}\\n")
"""
LIVE = """
import time, pytest
from log import ran

@pytest.mark.live("x")
@pytest.mark.parametrize("i", range(3))
def test_live(i):
    ran(f"live-start {i}")
    time.sleep(1.0)
    ran(f"live-end {i}")

@pytest.mark.ray
@pytest.mark.parametrize("i", range(3))
def test_ray(i):
    ran(f"ray {i}")
    time.sleep(0.2)
"""
PLAIN = """
import time, pytest
from log import ran

@pytest.mark.parametrize("i", range(4))
def test_plain(i):
    ran(f"{__name__} {i}")
    time.sleep(0.2)
"""


def test_live_first_alone_then_modules_spread(tmp_path: Path) -> None:
    proj = tmp_path / "proj"
    proj.mkdir()
    for name, text in {
        "conftest.py": CONFTEST,
        "pytest.ini": INI,
        "log.py": LOG,
        "test_b_live.py": LIVE,
        "test_a_plain.py": PLAIN,
        "test_c_plain.py": PLAIN,
    }.items():
        (proj / name).write_text(text, encoding="utf-8")
    log = tmp_path / "ran.txt"
    env = {
        **os.environ,
        "PLAN_LOG": str(log),
        "PYTHONPATH": os.pathsep.join(
            [str(ROOT), str(ROOT / "demo"), str(proj), os.environ.get("PYTHONPATH", "")]
        ),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "-p", "no:cacheprovider", "-q"],
        cwd=proj,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "14 passed" in proc.stdout, proc.stdout[-3000:]
    rows = [line.split(" ", 2) for line in log.read_text().splitlines()]
    runs = [(float(t), worker, what) for t, worker, what in rows]
    live = [r for r in runs if r[2].startswith("live")]
    rest = [r for r in runs if not r[2].startswith("live")]
    # the live tests: one worker, in order
    assert len({w for _, w, _ in live}) == 1, live
    assert [what for _, _, what in live] == [
        f"live-{e} {i}" for i in range(3) for e in ("start", "end")
    ]
    # nothing else started before the last live test ended, on any worker
    last_live = max(t for t, _, _ in live)
    assert all(t >= last_live for t, _, _ in rest), (live, rest)
    # the Ray tests on one worker; each plain module on one worker; both workers ran some
    assert len({w for _, w, what in rest if what.startswith("ray")}) == 1, rest
    for module in ("test_a_plain", "test_c_plain"):
        assert len({w for _, w, what in rest if what.startswith(module)}) == 1, rest
    assert {w for _, w, _ in rest} == {"gw0", "gw1"}, rest
