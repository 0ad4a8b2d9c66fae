"""The terminal report: the verdict first, then the culprit, the processes, the deciding stack.

Everything is built from `rich.text.Text` (never markup strings), so brackets in stacks and log
lines (`[rank1]:[E1129 ...]`) print as they are. Colour is only ever a second cue: the culprit row
and the deciding frames also carry a marker, so the report reads the same with NO_COLOR or in a
pipe, where rich writes plain text. Lines never exceed min(console width, 100) columns.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass

from rich import box
from rich.cells import cell_len
from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.panel import Panel
from rich.segment import Segment, Segments
from rich.table import Table
from rich.text import Text

from slime_hangdoctor.render.labels import (
    culprit_details,
    culprit_name,
    headline,
    report_facts,
    split_steps,
)
from slime_hangdoctor.render.printable import printable_diagnosis
from slime_hangdoctor.render.rows import group_label, group_node, shown_rows, table_note
from slime_hangdoctor.verdict import (
    Culprit,
    Diagnosis,
    Finding,
    RoleRow,
    Severity,
    StackExcerpt,
    Status,
)

__all__ = ["BRIEF_LINES", "MAX_WIDTH", "render_brief", "render_terminal"]

MAX_WIDTH = 100
BRIEF_LINES = 24  # `--brief`: one screen (24 lines at 100 columns)
BRIEF_CULPRITS = 3  # culprits named in a brief report; more are counted
BRIEF_DOUBTS = 2
SUMMARY_LINES = 3  # the panel's summary, cut where culprits follow (their reasons are under Why)
_INDENT = 2
BLIND_SPOTS = "Blind spots (not seen, so not ruled out)"
_OWN_LINE = frozenset({"taken", "blocked for"})  # facts that start a line of the panel
_CODE_SPAN = r"`[^`]+`"  # commands in next steps: coloured, backticks kept for plain text

_STATUS_STYLES: dict[Status, str] = {
    Status.HUNG: "red",
    Status.PROGRESSING: "green",
    Status.IDLE: "blue",
    Status.UNKNOWN: "yellow",
}
_SEVERITY_STYLES: dict[Severity, str] = {
    Severity.CRITICAL: "bold red",
    Severity.WARNING: "bold yellow",
    Severity.INFO: "bold blue",
}


@dataclass(frozen=True)
class _Glyphs:
    marker: str
    dot: str
    cut: str


_UNICODE = _Glyphs(marker="▶", dot="·", cut="…")
_ASCII = _Glyphs(marker=">", dot="|", cut="...")


def render_terminal(diagnosis: Diagnosis, console: Console) -> None:
    """Print the report for `diagnosis` on `console`, at most 100 columns wide (control
    characters of bundle text shown escaped: render/printable.py)."""
    diagnosis = printable_diagnosis(diagnosis)
    width = min(console.width, MAX_WIDTH)
    glyphs = _ASCII if console.options.ascii_only else _UNICODE
    _print(console, width, _blocks(diagnosis, width, glyphs))


def render_brief(diagnosis: Diagnosis, console: Console) -> None:
    """`--brief`: the verdict, the culprit and why, the top next steps and the blind spots that
    could change the verdict; one screen (BRIEF_LINES at 100 columns). Reasons and blind spots are
    cut to one line each (the full report has them whole); next steps wrap (they are pasted)."""
    diagnosis = printable_diagnosis(diagnosis)
    width = min(console.width, MAX_WIDTH)
    glyphs = _ASCII if console.options.ascii_only else _UNICODE
    _print(console, width, _brief_blocks(diagnosis, width, glyphs))


def _print(console: Console, width: int, blocks: list[RenderableType]) -> None:
    options = console.options.update(width=width)
    for index, block in enumerate(blocks):
        if index:
            console.print()
        for line in console.render_lines(block, options, pad=False):
            console.print(Segments([*_rstrip(line), Segment.line()]), crop=False)


def _rstrip(line: list[Segment]) -> list[Segment]:
    """Drop the padding rich leaves at the end of table and panel lines (noise in logs and diffs)."""
    trimmed = list(line)
    while trimmed and not trimmed[-1].control:
        last = trimmed.pop()
        text = last.text.rstrip(" ")
        if text:
            trimmed.append(Segment(text, last.style))
            break
    return trimmed


def _blocks(diagnosis: Diagnosis, width: int, glyphs: _Glyphs) -> list[RenderableType]:
    """The verdict, the culprit and the top next steps first (one screen), then the evidence."""
    verdict = diagnosis.verdict
    style = _STATUS_STYLES[verdict.status]
    steps = split_steps(verdict)
    lines = SUMMARY_LINES if verdict.culprits else None  # the culprits' reasons follow in full
    blocks: list[RenderableType] = [_verdict_panel(diagnosis, style, glyphs, width, lines)]
    if verdict.culprits:
        blocks.append(_top_culprits(verdict.culprits, style, glyphs, width, brief=False))
    if steps.top:
        blocks.append(_steps("Next steps", steps.top, 1))
    if _held_back(verdict.culprits, width, glyphs):
        blocks.append(_culprits(verdict.culprits, style, glyphs))
    if diagnosis.rows:
        blocks.append(_processes(diagnosis.rows, style, glyphs))
    if diagnosis.excerpt is not None:
        blocks.append(_stack(diagnosis.excerpt, style, width, glyphs))
    if verdict.findings:
        blocks.append(_findings(verdict.findings, glyphs))
    if steps.more:
        blocks.append(_steps("More next steps", steps.more, steps.more_start))
    if verdict.blind_spots:
        blocks.append(_blind_spots(verdict.blind_spots))
    return blocks


def _brief_blocks(diagnosis: Diagnosis, width: int, glyphs: _Glyphs) -> list[RenderableType]:
    verdict = diagnosis.verdict
    style = _STATUS_STYLES[verdict.status]
    blocks: list[RenderableType] = [_verdict_panel(diagnosis, style, glyphs, width, 1)]
    if verdict.culprits:
        blocks.append(_top_culprits(verdict.culprits, style, glyphs, width, brief=True))
    if top := split_steps(verdict).top:
        blocks.append(_steps("Next steps", top, 1))
    blocks.append(_brief_doubts(diagnosis))
    return blocks


def _top_culprits(
    culprits: tuple[Culprit, ...], style: str, glyphs: _Glyphs, width: int, brief: bool
) -> RenderableType:
    """Who, above the next steps: a line per culprit (BRIEF_CULPRITS; more are counted) and the
    first culprit's first reason (brief: one line; else at most two, the rest under "Why")."""
    lines: list[RenderableType] = []
    for index, culprit in enumerate(culprits[:BRIEF_CULPRITS]):
        head = Text()
        head.append(f"{glyphs.marker} {culprit_name(culprit)}", style=f"bold {style}")
        details = [p for p in culprit_details(culprit) if p[0] != "actor"]
        for at, (label, value) in enumerate(details):
            head.append("   " if at == 0 else f" {glyphs.dot} ", style="dim")
            head.append(f"{label} ", style="dim")
            head.append(compact_text(value))
        head.no_wrap, head.overflow = True, "ellipsis"
        lines.append(head)
        if index == 0 and culprit.actor_id is not None and not brief:
            lines.append(_one_line(f"{' ' * (len(glyphs.marker) + 1)}actor {culprit.actor_id}"))
        if index == 0:
            reasons = [r for r in culprit.why.split(" | ") if r.strip()]
            first = compact_text(reasons[0]) if reasons else ""
            room = _why_room(width, glyphs)
            why = Text("why ", style="dim")
            why.append(first if brief else _cut(first, room, 2, glyphs.cut))
            under = len(glyphs.marker) + 1
            lines.append(Padding(_one_line_if(why, brief), (0, 0, 0, under), expand=False))
            if len(reasons) > 1 and not brief:
                others = f"{' ' * under}{len(reasons) - 1} more reason(s) under Why, below"
                lines.append(_one_line(others, style="dim"))
    if len(culprits) > BRIEF_CULPRITS:
        count = len(culprits) - BRIEF_CULPRITS
        lines.append(_one_line(f"and {count} more culprit(s): under Why, below", style="dim"))
    if brief:
        return Group(*lines)
    title = "Culprit" if len(culprits) == 1 else f"Culprits ({len(culprits)})"
    return _section(title, Group(*lines))


def _held_back(culprits: tuple[Culprit, ...], width: int, glyphs: _Glyphs) -> bool:
    """Whether the lines above the steps left something of the culprits out (a second culprit, a
    second reason, a reason cut short): then "Why" follows the steps with all of it."""
    if len(culprits) != 1:
        return bool(culprits)
    reasons = [r for r in culprits[0].why.split(" | ") if r.strip()]
    if len(reasons) > 1:
        return True
    room = _why_room(width, glyphs)
    first = compact_text(reasons[0]) if reasons else ""
    return _cut(first, room, 2, glyphs.cut) != first


def _why_room(width: int, glyphs: _Glyphs) -> int:
    """Columns of the first reason above the steps (after the indent, the marker and `why `)."""
    return width - 2 * _INDENT - len(glyphs.marker) - len("why ")


def _one_line_if(text: Text, one: bool) -> Text:
    if one:
        text.no_wrap, text.overflow = True, "ellipsis"
    return text


def _cut(text: str, room: int, lines: int, cut: str) -> str:
    """`text` cut to what wraps into `lines` lines of `room` columns, ending in `cut` if cut."""
    wrapped = textwrap.wrap(text, max(room, 10))
    if len(wrapped) <= lines:
        return text
    kept = " ".join(wrapped[:lines])
    return kept[: max(0, len(kept) - len(cut) - 1)].rstrip() + cut


def _brief_doubts(diagnosis: Diagnosis) -> RenderableType:
    """The blind spots that could change the verdict (at most BRIEF_DOUBTS), and how many more
    blind spots the full report lists."""
    doubts = diagnosis.doubts
    others = len(diagnosis.verdict.blind_spots) - len(doubts[:BRIEF_DOUBTS])
    more = f"{others} other blind spot(s): the full report (without --brief) lists them"
    if not doubts:
        return _one_line(more if others else "No blind spots.", style="dim")
    lines = [_one_line(f"- {doubt}") for doubt in doubts[:BRIEF_DOUBTS]]
    if others:
        lines.append(_one_line(f"  {more}", style="dim"))
    return _section("Blind spots that could change this verdict", Group(*lines))


def _one_line(text: str, style: str = "") -> Text:
    line = Text(text, style=style)
    line.no_wrap, line.overflow = True, "ellipsis"
    return line


def _steps(title: str, steps: tuple[str, ...], first: int) -> RenderableType:
    return _listing(title, [f"{i}." for i, _ in enumerate(steps, first)], steps)


def _blind_spots(spots: tuple[str, ...], title: str = BLIND_SPOTS) -> RenderableType:
    return _listing(title, ["-"] * len(spots), spots)


def _section(title: str, body: RenderableType) -> RenderableType:
    return Group(Text(title, style="bold"), Padding(body, (0, 0, 0, _INDENT), expand=False))


def _verdict_panel(
    diagnosis: Diagnosis, style: str, glyphs: _Glyphs, width: int, lines: int | None = None
) -> RenderableType:
    """The headline, the summary (`lines`: cut to that many lines) and the verdict's facts."""
    verdict = diagnosis.verdict
    summary = Text(verdict.summary, "bold")
    if lines == 1:
        summary = _one_line(verdict.summary, "bold")
    elif lines is not None:
        summary = Text(_cut(verdict.summary, width - 4, lines, glyphs.cut), "bold")
    facts = Text()
    for index, (label, value) in enumerate(report_facts(diagnosis)):
        if label in _OWN_LINE:
            facts.append("\n")
        elif index:
            facts.append(f" {glyphs.dot} ", style="dim")
        facts.append(f"{label} ", style="dim")
        facts.append(value)
    return Panel(
        Group(summary, facts),
        title=Text(headline(verdict), style=f"bold {style}"),
        title_align="left",
        border_style=style,
        box=box.ROUNDED,
        padding=(0, 1),
    )


def _culprits(culprits: tuple[Culprit, ...], style: str, glyphs: _Glyphs) -> RenderableType:
    """Why: each culprit with its identity and every reason the analysis gave."""
    return _section("Why", Group(*(_culprit(c, style, glyphs) for c in culprits)))


def _culprit(culprit: Culprit, style: str, glyphs: _Glyphs) -> RenderableType:
    head = Text()
    head.append(f"{glyphs.marker} {culprit_name(culprit)}", style=f"bold {style}")
    ids = {"engine", "actor"}
    for index, (label, value) in enumerate(p for p in culprit_details(culprit) if p[0] not in ids):
        head.append("   " if index == 0 else f" {glyphs.dot} ", style="dim")
        head.append(f"{label} ", style="dim")
        head.append(value)
    facts = Table.grid(padding=(0, 1))
    facts.add_column(style="dim", no_wrap=True)
    facts.add_column(overflow="fold")
    for label, value in culprit_details(culprit):
        if label in ids:
            facts.add_row(Text(label), Text(value))
    for index, reason in enumerate(r for r in culprit.why.split(" | ") if r.strip()):
        facts.add_row(
            Text("why" if index == 0 else ""), Text(f"{glyphs.dot} {compact_text(reason)}")
        )
    return Group(head, Padding(facts, (0, 0, 0, len(glyphs.marker) + 1), expand=False))


def _processes(rows: tuple[RoleRow, ...], style: str, glyphs: _Glyphs) -> RenderableType:
    """The process table; in a large job alike processes are grouped (render/rows.py)."""
    marked = any(row.culprit for row in rows)
    nodes = {row.node_ip for row in rows}
    one_node = len(nodes) == 1
    shown = shown_rows(rows)
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold")
    if marked:
        table.add_column("", no_wrap=True)
    table.add_column("process", overflow="fold", ratio=2)
    if not one_node:
        table.add_column("node", no_wrap=True)
    table.add_column("pid", justify="right", no_wrap=True)
    table.add_column("stage", overflow="fold")
    table.add_column("state", overflow="fold", ratio=5)
    for item in shown.rows:
        row = item.row
        cells = [Text(compact_text(group_label(item)))]
        if not one_node:
            cells.append(Text(group_node(item)))
        cells += [
            Text("-" if row.pid is None or item.count > 1 else str(row.pid)),
            Text("-" if row.stage.value in ("unknown", "none") else row.stage.value),
            Text(compact_text(row.state)),
        ]
        if marked:
            cells.insert(0, Text(glyphs.marker if row.culprit else ""))
        table.add_row(*cells, style=f"bold {style}" if row.culprit else None)
    title = "Processes"
    if one_node and next(iter(nodes)) is not None:
        title += f" (all on node {next(iter(nodes))})"
    if shown.grouped:
        title += f" ({table_note(shown)})"
    return _section(title, table)


_PATH_IN_FRAME = re.compile(r"\((?:[^()\s]*/)?([^()/\s]+:\d+)\)")


def compact_text(text: str) -> str:
    """Table cells: `f (a/b/c.py:12)` -> `f (c.py:12)`, and URLs without their scheme."""
    return _PATH_IN_FRAME.sub(r"(\1)", text).replace("http://", "").replace("https://", "")


def _stack(excerpt: StackExcerpt, style: str, width: int, glyphs: _Glyphs) -> RenderableType:
    room = width - _INDENT - len(glyphs.marker) - 1
    lines: list[Text] = []
    for index, frame in enumerate(excerpt.frames):
        deciding = index in excerpt.highlight
        line = Text(f"{glyphs.marker if deciding else ' ' * len(glyphs.marker)} ")
        line.append(_fit(frame, room, glyphs.cut), style=f"bold {style}" if deciding else "")
        line.no_wrap = True
        line.overflow = "ellipsis"
        lines.append(line)
    if not lines:
        lines.append(Text("(no frames)", style="dim"))
    return _section(f"Stack of {excerpt.title}, innermost first", Group(*lines))


def _fit(frame: str, room: int, cut: str) -> str:
    """Cut a long frame in the middle: the function name and the `file:line` end both stay."""
    if cell_len(frame) <= room or room <= len(cut) + 2:
        return frame
    keep = room - len(cut)
    head = keep // 2
    return frame[:head] + cut + frame[len(frame) - (keep - head) :]


def _findings(findings: tuple[Finding, ...], glyphs: _Glyphs) -> RenderableType:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True)
    grid.add_column()
    for finding in findings:
        message = Text(finding.message)
        message.append(f" ({finding.rule})", style="dim")
        severity = Text(finding.severity.value.upper(), style=_SEVERITY_STYLES[finding.severity])
        grid.add_row(severity, Group(message, _evidence(finding.evidence, glyphs)))
    return _section("Findings", grid)


def _evidence(items: tuple[str, ...], glyphs: _Glyphs) -> RenderableType:
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True, style="dim")
    grid.add_column(overflow="fold")
    for item in items:
        grid.add_row(Text(glyphs.dot), Text(item))
    return Padding(grid, (0, 0, 0, _INDENT), expand=False)


def _listing(title: str, bullets: list[str], items: tuple[str, ...]) -> RenderableType:
    grid = Table.grid(padding=(0, 1))
    grid.add_column(justify="right", no_wrap=True)
    grid.add_column()
    for bullet, item in zip(bullets, items, strict=True):
        text = Text(item, overflow="fold")
        text.highlight_regex(_CODE_SPAN, "cyan")
        grid.add_row(Text(bullet), text)
    return _section(title, grid)
