"""Every recorded bundle in tests/fixtures, replayed through today's loader and analysis, gets the
verdict its golden copy records (tests/fixtures/golden/verdicts/<bundle>.json).

A refactor must leave every golden unchanged. A change that is meant to change a verdict regenerates
the goldens deliberately and commits the reviewed diff:

    PYTHONPATH=$PWD python -m tests.unit.test_golden_verdicts --write

The golden keeps what a user acts on: status, stage, confidence, whether it is only suspected, the
exit code, the culprits (role and identity, in order) and the findings' rule ids (in order). Texts
(summary, why, next steps) are not kept, so rewording a message needs no regeneration."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from slime_hangdoctor.pipeline import analyse_bundle

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
GOLDEN = FIXTURES / "golden" / "verdicts"


def recorded_bundles() -> dict[str, Path]:
    """Every bundle under tests/fixtures: a folder with a manifest.json, or a demo `.tar.gz`."""
    found: dict[str, Path] = {}
    for manifest in sorted(FIXTURES.rglob("manifest.json")):
        found[manifest.parent.name] = manifest.parent
    for archive in sorted(FIXTURES.rglob("*.tar.gz")):
        found[f"{archive.parent.name}-{archive.name.removesuffix('.tar.gz')}"] = archive
    return found


def verdict_essentials(bundle: Path) -> dict[str, Any]:
    v = analyse_bundle(bundle).diagnosis.verdict
    return {
        "status": v.status.value,
        "stage": v.stage.value,
        "confidence": v.confidence,
        "suspected": v.suspected,
        "exit_code": int(v.exit_code),
        "culprits": [
            {
                "role": c.role.value,
                "node_ip": c.node_ip,
                "pid": c.pid,
                "rank": c.rank,
                "engine_url": c.engine_url,
                "actor_id": c.actor_id,
                "gpu": c.gpu,
            }
            for c in v.culprits
        ],
        "findings": [f.rule for f in v.findings],
    }


BUNDLES = recorded_bundles()


def test_every_recorded_bundle_has_a_golden_and_every_golden_a_bundle() -> None:
    assert len(BUNDLES) >= 26
    goldens = {p.stem for p in GOLDEN.glob("*.json")}
    assert goldens == set(BUNDLES), (
        "regenerate with `python -m tests.unit.test_golden_verdicts --write`"
    )


@pytest.mark.parametrize("name", sorted(BUNDLES))
def test_replayed_verdict_matches_its_golden(name: str) -> None:
    golden = json.loads((GOLDEN / f"{name}.json").read_text())
    assert verdict_essentials(BUNDLES[name]) == golden


def write_goldens() -> None:
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for old in GOLDEN.glob("*.json"):
        if old.stem not in BUNDLES:
            old.unlink()
    for name, path in BUNDLES.items():
        text = json.dumps(verdict_essentials(path), indent=2, sort_keys=True) + "\n"
        (GOLDEN / f"{name}.json").write_text(text)
        print(f"wrote {GOLDEN / name}.json")


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m tests.unit.test_golden_verdicts --write")
    write_goldens()
