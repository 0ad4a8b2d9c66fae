"""The README's two set-up commands, exactly as the README shows them.

Each begins by making and entering a virtualenv, `.venv` in the checkout (VENV_PREFIX). `.ci/run`
runs the test command with that virtualenv moved to a fresh folder of its own
(`python3 tests/readme_commands.py test --venv DIR` prints it; stdlib only, so it runs before
anything is installed), and tests/integration/test_readme_setup.py runs the demo command the same
way: the command is the README's but for where its virtualenv lies, so a `.venv` a developer already
has is neither reused nor touched, and what CI proves is what a newcomer types.

    python3 tests/readme_commands.py demo|test [--venv DIR]
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
SECTION = "## Set up on a fresh machine"
_BLOCK_RE = re.compile(r"^```bash\n(.*?)^```", re.MULTILINE | re.DOTALL)
# how each set-up command begins: a virtualenv first (a PEP 668 system Python refuses pip)
VENV_PREFIX = "python3 -m venv .venv && . .venv/bin/activate && "


class ReadmeError(ValueError):
    """The README's set-up section is not two one-line bash commands."""


def setup_commands(readme: Path = README) -> dict[str, str]:
    """{"demo": ..., "test": ...}: the set-up section's two bash blocks, in that order."""
    text = readme.read_text(encoding="utf-8")
    start = text.find(SECTION)
    if start < 0:
        raise ReadmeError(f"{readme} has no {SECTION!r} section")
    body = text[start + len(SECTION) :]
    end = body.find("\n## ")
    blocks = [b.strip() for b in _BLOCK_RE.findall(body if end < 0 else body[:end])]
    if len(blocks) != 2 or any("\n" in b or not b for b in blocks):
        raise ReadmeError(f"{SECTION!r} must hold exactly two one-line bash commands: {blocks}")
    return {"demo": blocks[0], "test": blocks[1]}


def in_venv(command: str, venv: Path) -> str:
    """`command` with its virtualenv at `venv` instead of the checkout's `.venv`; the rest as is."""
    if not command.startswith(VENV_PREFIX):
        raise ReadmeError(f"a set-up command must begin with {VENV_PREFIX!r}: {command!r}")
    where = shlex.quote(str(venv))
    rest = command[len(VENV_PREFIX) :]
    return f"python3 -m venv {where} && . {shlex.quote(str(venv / 'bin' / 'activate'))} && {rest}"


def _main(args: list[str]) -> str:
    command = setup_commands()[args[0]]
    if args[1:2] == ["--venv"] and len(args) == 3:
        return in_venv(command, Path(args[2]))
    if len(args) != 1:
        raise IndexError(args)
    return command


if __name__ == "__main__":
    try:
        print(_main(sys.argv[1:]))
    except (IndexError, KeyError):
        sys.exit("usage: python3 tests/readme_commands.py demo|test [--venv DIR]")
    except ReadmeError as exc:
        sys.exit(f"README: {exc}")
