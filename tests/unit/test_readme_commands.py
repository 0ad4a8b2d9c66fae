"""The README holds exactly the two set-up commands (demo, then tests), and CI reads the test
command from it (tests/readme_commands.py), so what CI proves is what a newcomer types."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.readme_commands import README, VENV_PREFIX, ReadmeError, in_venv, setup_commands

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_holds_the_two_setup_commands() -> None:
    cmds = setup_commands()
    assert list(cmds) == ["demo", "test"]
    # a virtualenv first (a PEP 668 system Python refuses pip); the demo is a distribution of its
    # own (demo/): both commands install it beside the doctor; the tests need the dev extra too
    # (tests/test_lint.py runs ruff, mypy and deptry)
    install = VENV_PREFIX + "python3 -m pip install"
    assert cmds["demo"].startswith(install + " -e . -e ./demo ")
    assert cmds["demo"].endswith("&& slime-hangdoctor demo")
    assert cmds["test"].startswith(install + " -e '.[test,dev]' -e ./demo ")
    assert cmds["test"].endswith("&& python3 -m pytest")


def test_a_third_setup_block_is_refused(tmp_path: Path) -> None:
    text = README.read_text(encoding="utf-8")
    extra = text.replace("## Use", "```bash\npip install something-else\n```\n\n## Use", 1)
    bad = tmp_path / "README.md"
    bad.write_text(extra, encoding="utf-8")
    with pytest.raises(ReadmeError, match="exactly two"):
        setup_commands(bad)


def test_the_virtualenv_moves_and_nothing_else(tmp_path: Path) -> None:
    """The README's command with its virtualenv elsewhere (a path with a space, quoted): the same
    command once that path is read back as `.venv`; a command without the prefix is refused."""
    where = tmp_path / "a venv"
    for command in setup_commands().values():
        moved = in_venv(command, where)
        assert moved.startswith(f"python3 -m venv '{where}' && . '{where}/bin/activate' && ")
        back = moved.replace(f"'{where}/bin/activate'", ".venv/bin/activate")
        assert back.replace(f"'{where}'", ".venv") == command
    with pytest.raises(ReadmeError, match="must begin with"):
        in_venv("python3 -m pip install -e .", where)


def test_ci_runs_the_readme_test_command_in_a_fresh_venv(tmp_path: Path) -> None:
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert 'readme_commands.py test --venv "$tmp/venv"' in script
    assert 'bash -c "$command"' in script
    printed = subprocess.run(
        [sys.executable, "tests/readme_commands.py", "test", "--venv", str(tmp_path / "v")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert printed == in_venv(setup_commands()["test"], tmp_path / "v")
