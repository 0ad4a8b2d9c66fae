"""What each of the repository's two distributions ships, read from wheels built for real
(`python3 -m pip wheel --no-deps`): the doctor's wheel holds the doctor and nothing of the demo (a
fake slime job and an SGLang stand-in are no part of what goes on a training node); the demo's
wheel (demo/) holds every file of its package, its job tree too, at the job's slime-relative paths.

The wheels are built from a copy of the checkout: a build in place leaves build/ behind, and
setuptools ships whatever stale files a build/ holds, so a second build could show an old tree.
Costs two isolated builds (about 20 s on a 2-core machine).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
DEMO_PACKAGE = ROOT / "demo" / "slime_hangdoctor_demo"
_NOT_SOURCE = shutil.ignore_patterns(
    ".git", "build", "dist", "*.egg-info", "__pycache__", ".mypy_cache", ".ruff_cache",
    ".pytest_cache", ".venv",
)  # fmt: skip


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """{"doctor": names in its wheel, "demo": names in the demo's wheel}."""
    tmp = tmp_path_factory.mktemp("wheels")
    tree = tmp / "checkout"
    shutil.copytree(ROOT, tree, ignore=_NOT_SOURCE)
    out = tmp / "out"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), ".", "./demo"],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    found: dict[str, list[str]] = {}
    for wheel in sorted(out.glob("*.whl")):
        dist = wheel.name.split("-")[0]
        with zipfile.ZipFile(wheel) as zf:
            found[{"slime_hangdoctor": "doctor", "slime_hangdoctor_demo": "demo"}[dist]] = (
                zf.namelist()
            )
    assert sorted(found) == ["demo", "doctor"], [w.name for w in out.glob("*.whl")]
    return found


def _package_files(names: list[str]) -> list[str]:
    return [n for n in names if ".dist-info/" not in n]


def test_the_doctors_wheel_holds_no_demo_file(wheels: dict[str, list[str]]) -> None:
    files = _package_files(wheels["doctor"])
    assert "slime_hangdoctor/cli.py" in files and "slime_hangdoctor/py.typed" in files
    assert all(n.startswith("slime_hangdoctor/") for n in files), files
    # nothing of the demo under any name: its package, its job tree, its SGLang stand-in
    demo_like = [
        n
        for n in files
        if any(part in {"demo", "job", "sglang", "slime", "megatron"} for part in n.split("/"))
        or "demo" in n.rsplit("/", 1)[-1]
    ]
    assert demo_like == []


def test_the_demos_wheel_holds_all_of_the_demo(wheels: dict[str, list[str]]) -> None:
    files = _package_files(wheels["demo"])
    want = sorted(str(p.relative_to(DEMO_PACKAGE.parent)) for p in DEMO_PACKAGE.rglob("*.py"))
    assert sorted(files) == want
    # the job tree keeps slime's relative paths (recorded stacks and goldens carry them)
    assert "slime_hangdoctor_demo/job/slime/ray/rollout.py" in files
    assert "slime_hangdoctor_demo/job/train.py" in files
