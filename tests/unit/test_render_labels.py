"""The words the reports share: every stage and role has one, durations read naturally."""

from __future__ import annotations

from dataclasses import replace

import pytest

from slime_hangdoctor.render.labels import (
    _ROLE_LABELS,
    culprit_name,
    headline,
    seconds,
    verdict_facts,
)
from slime_hangdoctor.verdict import STAGE_LABELS, Culprit, Role, Stage
from tests.unit.render_diagnoses import all_diagnoses


def test_every_stage_and_role_has_words() -> None:
    """A stage added to the contract must get a label, not fall back to its enum value."""
    assert set(STAGE_LABELS) == set(Stage)
    assert set(_ROLE_LABELS) == set(Role)


@pytest.mark.parametrize(
    ("value", "text"), [(0.0, "0.0 s"), (8.66, "8.7 s"), (119.9, "119.9 s"), (725.0, "12 min 5 s")]
)
def test_seconds(value: float, text: str) -> None:
    assert seconds(value) == text


def test_train_rank_culprit_is_named_by_its_rank() -> None:
    assert culprit_name(Culprit(role=Role.TRAIN_RANK, why="x", rank=3)) == "train rank 3"
    assert culprit_name(Culprit(role=Role.SGLANG_ENGINE, why="x", rank=3)) == "SGLang engine"


def test_headline_and_facts_of_a_hang() -> None:
    """The stage is named in words on the verdict line and by value among the facts."""
    verdict = all_diagnoses()["hung"].verdict
    assert headline(verdict) == "HUNG in weight-sync NCCL broadcast"
    assert verdict_facts(verdict) == [
        ("stage", "nccl_broadcast"),
        ("confidence", "high"),
        ("window", "5.0 s"),
        ("exit", "2 (critical)"),
    ]
    assert (
        headline(replace(verdict, suspected=True))
        == "HUNG (suspected) in weight-sync NCCL broadcast"
    )
