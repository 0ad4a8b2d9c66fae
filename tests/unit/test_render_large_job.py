"""The process table of a large job in the reports for a person (render/rows.py, issue 46 item 3).

A recorded hang grown to about 1,500 processes (`transforms.diagnosis_replicated`: every copy on
a node of its own, the fault kept on copy 0) and a recorded hang grown to 64 nodes of 8 train
ranks and a TP-8 engine each (`tests/fixtures/scaled.py`): the text and markdown reports show alike
processes as one counted row, every culprit on a row of its own, and at most ROW_LIMIT rows;
a recording's own table (a node or two) is shown whole, as before."""

from __future__ import annotations

import dataclasses
import io
import re

import pytest
from rich.console import Console

from slime_hangdoctor.render import render, render_markdown
from slime_hangdoctor.render import rows as rows_module
from slime_hangdoctor.render.rows import GROUP_OVER, ROW_LIMIT, shown_rows
from slime_hangdoctor.verdict import Diagnosis
from tests.unit.demo_bundles import DEMO, diagnosed

NAMES = ["train_rank_stuck", "weight_sync_health_check_queued"]


def _grown(name: str) -> tuple[Diagnosis, Diagnosis]:
    from tests.fixtures.transforms import diagnosis_replicated

    recorded = diagnosed(DEMO / f"{name}.tar.gz")
    return recorded, diagnosis_replicated(recorded, -(-1500 // len(recorded.rows)))


def _text(d: Diagnosis) -> str:
    console = Console(file=io.StringIO(), width=100, force_terminal=False)
    render(d, "text", console)
    out: str = console.file.getvalue()  # type: ignore[attr-defined]
    return out


def _section(report: str, title: str) -> list[str]:
    """The lines of a report's section, its title line first, up to the next blank line."""
    lines = report.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    return lines[start:end]


@pytest.mark.parametrize("name", NAMES)
def test_a_recordings_table_is_shown_whole(name: str) -> None:
    recorded = diagnosed(DEMO / f"{name}.tar.gz")
    assert len(recorded.rows) <= GROUP_OVER
    shown = shown_rows(recorded.rows)
    assert not shown.grouped and [s.row for s in shown.rows] == list(recorded.rows)
    assert "alike ones grouped" not in _text(recorded)


@pytest.mark.parametrize("name", NAMES)
def test_alike_processes_of_a_large_job_are_one_counted_row(name: str) -> None:
    recorded, d = _grown(name)
    shown = shown_rows(d.rows)
    assert shown.grouped and len(shown.rows) <= ROW_LIMIT
    # every process is counted once: in its own row, a group's, or the rows left out
    assert sum(s.count for s in shown.rows) + shown.left_out == len(d.rows)
    culprits = [r for r in d.rows if r.culprit]
    assert culprits and [s.row for s in shown.rows if s.row.culprit] == culprits
    assert all(s.count == 1 for s in shown.rows if s.row.culprit)
    for s in shown.rows:  # a group is processes of one role, stage and state
        alike = [
            r
            for r in d.rows
            if not r.culprit
            and (r.role, r.stage, r.state) == (s.row.role, s.row.stage, s.row.state)
        ]
        assert s.count in (1, len(alike)), (s, len(alike))
        if s.count > 1:
            assert s.nodes == len({r.node_ip for r in alike})
    text = _text(d)
    table = _section(text, "Processes")
    assert f"{len(d.rows)} processes, alike ones grouped" in table[0]
    for c in culprits:
        assert any(line.lstrip().startswith("▶") and str(c.pid) in line for line in table), table
    assert any(re.search(r"\d+ × ", line) for line in table), table
    assert len(text.splitlines()) < len(_text(recorded).splitlines()) + 2 * ROW_LIMIT
    markdown = render_markdown(d)
    body = markdown.split("### Processes", 1)[1].split("###", 1)[0]
    assert sum(1 for line in body.splitlines() if line.startswith("| ")) <= ROW_LIMIT + 1


def test_rows_past_the_limit_are_counted_and_culprits_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """With nothing grouped (every state its own: MIN_ALIKE out of reach), the table stops at
    ROW_LIMIT rows, the culprits among them wherever they stand, the rest counted."""
    _recorded, d = _grown("train_rank_stuck")
    monkeypatch.setattr(rows_module, "MIN_ALIKE", len(d.rows) + 1)
    culprit_last = dataclasses.replace(
        d, rows=(*[r for r in d.rows if not r.culprit], *[r for r in d.rows if r.culprit])
    )
    shown = shown_rows(culprit_last.rows)
    assert len(shown.rows) == ROW_LIMIT
    assert [s.row for s in shown.rows if s.row.culprit] == [r for r in d.rows if r.culprit]
    assert shown.left_out == len(d.rows) - ROW_LIMIT
    table = _section(_text(culprit_last), "Processes")
    assert f"{shown.left_out} more not shown" in table[0]
