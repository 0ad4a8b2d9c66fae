"""`verdict_from_json` reads back what `Verdict.to_json` wrote (the watchdog keeps a stall's verdict
in its state file): every verdict of the recorded demo and H200 bundles, and nothing else."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slime_hangdoctor.pipeline import analyse_bundle
from slime_hangdoctor.verdict import verdict_from_json

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
BUNDLES = sorted((FIXTURES / "analysis" / "demo").glob("*.tar.gz")) + sorted(
    p for p in (FIXTURES / "bundles").iterdir() if (p / "manifest.json").is_file()
)


@pytest.mark.parametrize("path", BUNDLES, ids=lambda p: p.name)
def test_every_recorded_verdict_reads_back_the_same(path: Path) -> None:
    verdict = analyse_bundle(path).diagnosis.verdict
    doc = json.loads(json.dumps(verdict.to_json()))  # through text, as the state file keeps it
    again = verdict_from_json(doc)
    assert again.to_json() == verdict.to_json()
    assert again.exit_code == verdict.exit_code and again.culprits == verdict.culprits


@pytest.mark.parametrize(
    "doc",
    [
        None,
        [],
        {"schema": "other/1"},
        {"schema": "slime-hangdoctor.verdict/1"},
        {"schema": "slime-hangdoctor.verdict/1", "status": "stuck", "stage": "none", "summary": ""},
        {"schema": "slime-hangdoctor.verdict/1", "status": "hung", "stage": "train", "summary": 3},
        {
            "schema": "slime-hangdoctor.verdict/1",
            "status": "hung",
            "stage": "train",
            "summary": "s",
            "culprits": [{"role": "train_rank", "why": "w", "pid": "12"}],
        },
        {
            "schema": "slime-hangdoctor.verdict/1",
            "status": "hung",
            "stage": "train",
            "summary": "s",
            "findings": [{"rule": "r", "severity": "loud", "message": "m"}],
        },
        # next steps: a string (written before steps were objects) or an object, nothing else
        {
            "schema": "slime-hangdoctor.verdict/1",
            "status": "hung",
            "stage": "train",
            "summary": "s",
            "next_steps": [3],
        },
        {
            "schema": "slime-hangdoctor.verdict/1",
            "status": "hung",
            "stage": "train",
            "summary": "s",
            "next_steps": [{"command": "py-spy dump --pid 1", "process": "1"}],
        },
        {
            "schema": "slime-hangdoctor.verdict/1",
            "status": "hung",
            "stage": "train",
            "summary": "s",
            "collected_at": "yesterday",
        },
    ],
)
def test_anything_else_is_a_value_error(doc: object) -> None:
    with pytest.raises(ValueError):
        verdict_from_json(doc)
