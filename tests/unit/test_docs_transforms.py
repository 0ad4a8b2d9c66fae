"""The docs name only transformations that exist (issue 33, item 5): every `transforms.<name>` in
docs/ and README.md, and every name the fixture policy of docs/architecture.md gives as an example,
is a function of tests/fixtures/transforms/."""

from __future__ import annotations

import re
from pathlib import Path

from tests.fixtures import transforms

ROOT = Path(__file__).resolve().parents[2]


def named_transforms() -> set[str]:
    found: set[str] = set()
    for path in [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]:
        found.update(re.findall(r"transforms\.(?!py\b)([A-Za-z_][A-Za-z0-9_]*)", path.read_text()))
    policy = (ROOT / "docs" / "architecture.md").read_text().split("## Fixture policy", 1)[1]
    policy = policy.split("\n## ", 1)[0]
    examples = policy.split("(e.g.", 1)[1].split(")", 1)[0] if "(e.g." in policy else ""
    found.update(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", examples))
    return found


def test_every_transform_the_docs_name_exists() -> None:
    names = named_transforms()
    assert names, "the docs name no transformation: the check reads nothing"
    missing = sorted(n for n in names if not callable(getattr(transforms, n, None)))
    assert missing == []
