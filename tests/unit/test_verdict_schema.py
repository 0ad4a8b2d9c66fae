"""The JSON contract `slime-hangdoctor.verdict/1` has a JSON Schema (draft 2020-12) shipped in the
package (issue 42, item 6): every recorded bundle's JSON report and every rendered example
validates against it with `jsonschema`; next steps are objects, and a verdict written before
(its next steps as strings, as the watchdog's state file keeps it) still reads."""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
from importlib.resources import files
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator, FormatChecker

from slime_hangdoctor.pipeline import analyse_bundle
from slime_hangdoctor.render import render_json
from slime_hangdoctor.render.html import render_html
from slime_hangdoctor.render.jsonout import report_json
from slime_hangdoctor.verdict import SCHEMA, SCHEMA_FILE, NextStep, verdict_from_json
from tests.unit.render_diagnoses import all_diagnoses
from tests.unit.test_golden_verdicts import BUNDLES

_SCHEMA = json.loads((files("slime_hangdoctor") / SCHEMA_FILE).read_text())
VALIDATOR = Draft202012Validator(_SCHEMA, format_checker=FormatChecker())


def _errors(doc: Any) -> list[str]:
    return [f"{list(e.absolute_path)}: {e.message}" for e in VALIDATOR.iter_errors(doc)]


def test_the_schema_is_a_valid_draft_2020_12_schema_named_by_the_contract() -> None:
    Draft202012Validator.check_schema(_SCHEMA)
    assert _SCHEMA["title"] == SCHEMA
    assert _SCHEMA["properties"]["schema"] == {"const": SCHEMA}


@pytest.mark.parametrize("name", sorted(BUNDLES))
def test_every_recorded_bundles_report_validates(name: str) -> None:
    report = report_json(analyse_bundle(BUNDLES[name]).diagnosis)
    assert not _errors(report), _errors(report)[:5]
    # what a bot keys on is there: objects with a command or words, and who made them
    for step in report["next_steps"]:
        assert step["by"] and (step["command"] or step["why"]), step
    for finding in report["findings"]:
        assert finding["by"], finding
    for culprit in report["culprits"]:
        assert len(culprit["by"]) == len(culprit["why"].split(" | ")) and all(culprit["by"])


@pytest.mark.parametrize("name", sorted(all_diagnoses()))
def test_every_rendered_example_validates(name: str) -> None:
    doc = json.loads(render_json(all_diagnoses()[name]))
    assert not _errors(doc), _errors(doc)[:5]


def test_the_schema_rejects_what_the_contract_does_not_allow() -> None:
    doc = report_json(analyse_bundle(BUNDLES["demo-rollout_engine_stuck"]).diagnosis)
    bad = dict(doc, status="stuck")
    assert _errors(bad)
    step = dict(doc["next_steps"][0], process="2870")  # a pid is an integer
    assert _errors(dict(doc, next_steps=[step]))
    assert _errors(dict(doc, collected_at="yesterday"))


def test_a_verdict_written_with_string_steps_still_reads_and_validates() -> None:
    """The watchdog's state file holds verdicts of earlier versions: next steps as their lines."""
    doc = report_json(analyse_bundle(BUNDLES["gpu-h200-rank-killed-fr"]).diagnosis)
    old = {
        k: v for k, v in doc.items() if k not in ("collected_at", "tool_version", "job", "bundle")
    }
    old["next_steps"] = [s["text"] for s in doc["next_steps"]]
    assert not _errors(old)
    v = verdict_from_json(old)
    assert [s.text for s in v.next_steps] == old["next_steps"]
    assert all(isinstance(s, NextStep) for s in v.next_steps)
    # and the new form round-trips
    again = verdict_from_json(doc).to_json()
    assert again["next_steps"] == doc["next_steps"]
    assert (again["collected_at"], again["job"]) == (doc["collected_at"], doc["job"])


def test_the_json_of_every_format_validates(tmp_path: Path) -> None:
    """`analyse -f json` as the CLI prints it, and the JSON the HTML report embeds (its raw
    evidence section), of a recorded bundle: both are the contract."""
    bundle = BUNDLES["gpu-h200-rank-killed-fr"]
    run = subprocess.run(
        [sys.executable, "-m", "slime_hangdoctor", "analyse", str(bundle), "-f", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 2, run.stderr
    printed = json.loads(run.stdout)
    assert not _errors(printed), _errors(printed)[:5]
    assert printed["bundle"] == str(bundle.resolve()) and printed["tool_version"]
    page = render_html(analyse_bundle(bundle).diagnosis)
    raw = re.search(r'<section id="raw-evidence">.*?<pre>(.*?)</pre>', page, re.DOTALL)
    assert raw is not None
    embedded = json.loads(html.unescape(raw.group(1)))
    assert not _errors(embedded), _errors(embedded)[:5]
