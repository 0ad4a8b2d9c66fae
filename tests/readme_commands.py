"""The README's two set-up commands, exactly as the README shows them.

`.ci/run` runs the test command in a fresh virtualenv (`python3 tests/readme_commands.py test`
prints it; stdlib only, so it runs before anything is installed), and
tests/integration/test_readme_setup.py runs the demo command in another fresh virtualenv: what CI
proves is what a newcomer types.

    python3 tests/readme_commands.py demo|test
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
SECTION = "## Set up on a fresh machine"
_BLOCK_RE = re.compile(r"^```bash\n(.*?)^```", re.MULTILINE | re.DOTALL)


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


if __name__ == "__main__":
    try:
        print(setup_commands()[sys.argv[1]])
    except (IndexError, KeyError):
        sys.exit("usage: python3 tests/readme_commands.py demo|test")
    except ReadmeError as exc:
        sys.exit(f"README: {exc}")
