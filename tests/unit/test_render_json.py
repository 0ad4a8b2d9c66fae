"""The JSON report keeps the `slime-hangdoctor.verdict/1` contract and adds the process table."""

from __future__ import annotations

import json

import pytest

from slime_hangdoctor.render import render_json
from tests.unit.render_diagnoses import all_diagnoses

EXAMPLES = all_diagnoses()
CONTRACT_KEYS = {
    "schema",
    "status",
    "stage",
    "summary",
    "culprits",
    "findings",
    "next_steps",
    "blind_spots",
    "window_s",
    "elapsed_s",
}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_contract_keys_and_values_are_unchanged(name: str) -> None:
    """Bots reading verdict/1 must not see a renamed or changed top-level key."""
    # GIVEN
    diagnosis = EXAMPLES[name]
    # WHEN
    report = json.loads(render_json(diagnosis))
    # THEN
    contract = diagnosis.verdict.to_json()
    assert contract.keys() >= CONTRACT_KEYS
    assert {key: report[key] for key in contract} == contract
    assert set(report) - set(contract) == {"processes", "stack_excerpt", "waits"}


def test_hung_report_values() -> None:
    """The values a pager or an issue bot keys on, for the real NCCL broadcast hang."""
    report = json.loads(render_json(EXAMPLES["hung"]))
    assert report["schema"] == "slime-hangdoctor.verdict/1"
    assert (report["status"], report["stage"]) == ("hung", "nccl_broadcast")
    assert report["summary"].startswith("The weight-sync NCCL broadcast is stuck")
    assert report["culprits"] == [
        {
            "role": "train_rank",
            "why": EXAMPLES["hung"].verdict.culprits[0].why,
            "node_ip": "192.0.2.2",
            "pid": 572,
            "rank": 1,
            "engine_url": None,
            "actor_id": None,
            "gpu": 1,
            "process": None,  # additive: which process of an engine (None for a train rank)
            "by": [],  # additive: the rules that gave each reason (none in a hand-made verdict)
            "dead": False,  # additive: the process has died (the report says so first)
        }
    ]
    assert [f["severity"] for f in report["findings"]] == ["critical", "critical", "warning"]
    assert len(report["next_steps"]) == 4 and len(report["blind_spots"]) == 2
    assert (report["window_s"], report["elapsed_s"], report["exit_code"]) == (5.0, 8.7, 2)


def test_engine_culprit_keeps_url_and_actor() -> None:
    """An engine culprit is found again by its URL and Ray actor id."""
    engine = json.loads(render_json(EXAMPLES["engine_culprit"]))["culprits"][1]
    assert engine["role"] == "sglang_engine"
    assert engine["engine_url"] == "http://192.0.2.2:15000"
    assert engine["actor_id"] == "7d2f1c0a9be64e2f8c31a5d04e6b7f10a1b2c3d4"


def test_processes_list_follows_the_rows() -> None:
    """One object per role row, culprit flagged."""
    report = json.loads(render_json(EXAMPLES["hung"]))
    assert report["processes"] == [
        {
            "role": row.role.value,
            "label": row.label,
            "node_ip": row.node_ip,
            "pid": row.pid,
            "stage": row.stage.value,
            "state": row.state,
            "culprit": row.culprit,
        }
        for row in EXAMPLES["hung"].rows
    ]
    assert [p["pid"] for p in report["processes"] if p["culprit"]] == [572]


def test_stack_excerpt_is_kept_or_null() -> None:
    """The deciding frames travel with the verdict; no stack is null, not missing."""
    hung = json.loads(render_json(EXAMPLES["hung"]))["stack_excerpt"]
    assert hung["frames"][0] == "never_join (nccl_hang.py:11)" and hung["highlight"] == [0]
    assert json.loads(render_json(EXAMPLES["unknown"]))["stack_excerpt"] is None
