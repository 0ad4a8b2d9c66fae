"""docs/performance.md is what `python -m benchmarks.run` writes from benchmarks/results/ (issue 46
item 6): every row of its summary comes from the results file it cites, with that run's machine
and date, and a re-run keeps the sections it does not write (1a, 1b)."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

from benchmarks import report, summary

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "performance.md"
RESULTS = ROOT / "benchmarks" / "results"


def _summary_rows(text: str) -> list[list[str]]:
    section = text.split("\n## Summary\n", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("| ")]
    return [[c.strip() for c in line.strip("|").split(" | ")] for line in lines[1:]]


def _cited(cell: str) -> str:
    match = re.fullmatch(r"`([^`]+)`(?: \(([^)]+)\))?", cell)
    assert match is not None, cell
    return match.group(1)


def test_every_summary_row_comes_from_the_results_file_it_cites() -> None:
    rows = _summary_rows(DOC.read_text())
    assert len(rows) >= 10, rows
    for cells in rows:
        name = _cited(cells[-1])
        derived = summary.rows_from(name, json.loads((RESULTS / name).read_text()))
        assert cells in [r.cells() for r in derived], (name, cells)


def test_each_row_says_its_machine_and_date() -> None:
    for cells in _summary_rows(DOC.read_text()):
        where = cells[4]
        assert re.search(r"\d+ cores", where) and re.search(r"20\d\d-\d\d-\d\d", where), cells


def test_the_summary_is_current() -> None:
    """Today's figures: every file the summary draws on, none left out."""
    expected = [r.cells() for r in summary.rows(RESULTS)]
    assert _summary_rows(DOC.read_text()) == expected
    assert {_cited(c[-1]) for c in expected} == set(summary.SOURCES)


def test_the_time_to_verdict_row_is_the_newest_measurement() -> None:
    """The 2-core box's full run (latest.json, 'missed') is older than the lent machine's A/B."""
    rows = _summary_rows(DOC.read_text())
    verdict = [c for c in rows if c[0].startswith("1. time to verdict")]
    assert verdict and all(_cited(c[-1]) != "latest.json" for c in verdict), verdict


def test_a_changed_figure_changes_its_row() -> None:
    name = "device-ab-issue36-final2.json"
    results = json.loads((RESULTS / name).read_text())
    before = [r.cells() for r in summary.rows_from(name, results)]
    changed = copy.deepcopy(results)
    form = changed["faults"]["weight_sync_engine_missing"]["forms"]["gcs"]["head"]
    form["over_window_median_s"] += 1.0
    after = [r.cells() for r in summary.rows_from(name, changed)]
    assert after != before and any("**missed**" in c for c in after[0]), after[0]


def test_the_doc_is_what_the_generator_writes_and_keeps_1a_and_1b() -> None:
    text = DOC.read_text()
    latest = json.loads((RESULTS / "latest.json").read_text())
    baseline = json.loads((RESULTS / "before-fixes.json").read_text())
    written = report.render(latest, baseline, RESULTS)
    assert "\n## 1a. " not in written and "\n## 1b. " not in written
    again = report.keep_sections(text, written)
    assert again == text
    heads = [line for line in again.splitlines() if line.startswith("## ")]
    first, a, b = (
        next(i for i, h in enumerate(heads) if h.startswith(p))
        for p in ("## 1.", "## 1a.", "## 1b.")
    )
    assert first < a < b == a + 1, heads


def test_keep_sections_puts_a_kept_section_after_the_one_it_followed() -> None:
    old = "# T\n\nx\n\n## 1. A\n\na\n\n## 1a. Kept\n\nk\n\n## 2. B\n\nb\n"
    new = "# T\n\ny\n\n## 1. A\n\nA2\n\n## 2. B\n\nB2\n"
    assert report.keep_sections(old, new) == (
        "# T\n\ny\n\n## 1. A\n\nA2\n\n## 1a. Kept\n\nk\n\n## 2. B\n\nB2\n"
    )
