"""The demo job run as miles lays out its files (issue 24 item 5): launch.miles_job's tree
(slime's package renamed miles/, RolloutManager in miles/ray/rollout/rollout_manager.py), recorded
live (tests/fixtures/analysis/demo_layouts/miles-<fault>.tar.gz, provenance in
tests/fixtures/README.md), gets the verdict the slime-layout recording of the same fault, taken in
the same session with the same code (demo_layouts/slime-<fault>.tar.gz), gets: same status, stage,
confidence, exit code, culprit roles and findings. Its stacks run miles's files, and the
frames tell the miles layout."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from slime_hangdoctor.bundle import open_bundle
from slime_hangdoctor.load import load_snapshot
from slime_hangdoctor.parsers.pyspy import ALL_STACKS
from slime_hangdoctor.pipeline import analyse_bundle

PAIRS = Path(__file__).resolve().parents[1] / "fixtures" / "analysis" / "demo_layouts"
FAULTS = ("reward_hang", "eval_hang")


def _essentials(bundle: Path) -> dict[str, Any]:
    v = analyse_bundle(bundle).diagnosis.verdict
    return {
        "status": v.status,
        "stage": v.stage,
        "confidence": v.confidence,
        "suspected": v.suspected,
        "exit_code": int(v.exit_code),
        "culprits": [c.role for c in v.culprits],
        "findings": [f.rule for f in v.findings],
    }


@pytest.mark.parametrize("fault", FAULTS)
def test_the_miles_layout_gets_the_slime_verdict(fault: str) -> None:
    miles = PAIRS / f"miles-{fault}.tar.gz"
    slime = PAIRS / f"slime-{fault}.tar.gz"
    assert _essentials(miles) == _essentials(slime)
    assert analyse_bundle(slime).diagnosis.verdict.extra.get("slime_layout") != "miles-2026-08"
    v = analyse_bundle(miles).diagnosis.verdict
    assert v.extra.get("slime_layout") == "miles-2026-08", v.extra.get("slime_layout")


@pytest.mark.parametrize("fault", FAULTS)
def test_the_miles_recording_runs_miles_files(fault: str) -> None:
    with open_bundle(PAIRS / f"miles-{fault}.tar.gz") as opened:
        snapshot = load_snapshot(opened)
    files = {
        (f.short_filename or f.filename).replace("\\", "/")
        for s in snapshot.joined(ALL_STACKS)
        for t in s.stack.threads
        for f in t.frames
    }
    assert "miles/ray/rollout/rollout_manager.py" in files
    assert not any(f.startswith("slime/") or "/slime/" in f for f in files)
