"""The README holds exactly the two set-up commands (demo, then tests), and CI reads the test
command from it (tests/readme_commands.py), so what CI proves is what a newcomer types."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.readme_commands import README, ReadmeError, setup_commands

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_holds_the_two_setup_commands() -> None:
    cmds = setup_commands()
    assert list(cmds) == ["demo", "test"]
    # the demo is a distribution of its own (demo/): both commands install it beside the doctor
    assert cmds["demo"].startswith("python3 -m pip install -e . -e ./demo ")
    assert cmds["demo"].endswith("&& slime-hangdoctor demo")
    assert cmds["test"].startswith("python3 -m pip install -e '.[test]' -e ./demo ")
    assert cmds["test"].endswith("&& python3 -m pytest")


def test_a_third_setup_block_is_refused(tmp_path: Path) -> None:
    text = README.read_text(encoding="utf-8")
    extra = text.replace("## Use", "```bash\npip install something-else\n```\n\n## Use", 1)
    bad = tmp_path / "README.md"
    bad.write_text(extra, encoding="utf-8")
    with pytest.raises(ReadmeError, match="exactly two"):
        setup_commands(bad)


def test_ci_runs_the_readme_test_command_in_a_fresh_venv() -> None:
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "python3 -m venv" in script and 'bash -c "$command"' in script
    printed = subprocess.run(
        [sys.executable, "tests/readme_commands.py", "test"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert printed == setup_commands()["test"]
