"""The markdown report: paste it into a GitHub issue as it is.

All text that comes from the job (summaries, frames, log lines) is escaped or fenced, so `<module>`,
`[rank1]`, `*args` and `|` show literally instead of turning into HTML, links or table cells. What
GitHub would turn into something else in prose is put in a code span, where it stays text: a
character reference (`&#x202E;`, `&rlm;`: GitHub decodes them, a bidi override then reverses what
follows; `&` is escaped everywhere else), a mention (`@user`, `@org/team`: it pings them), an issue
reference (`#12`, `org/repo#12`: it links and notifies), a bare URL, `www.` address or e-mail
address (made links). Characters that are not printable, bidi and zero-width ones included, are
escaped before any of this (render/printable.py).
"""

from __future__ import annotations

import re

from slime_hangdoctor import __version__
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
    SCHEMA,
    Culprit,
    Diagnosis,
    Finding,
    RoleRow,
    StackExcerpt,
    Stage,
    Verdict,
)

__all__ = ["render_markdown", "render_markdown_brief"]

MARKER = "▶"
BLIND_SPOTS = "Blind spots (not seen, so not ruled out)"
_SPECIAL = re.compile(r"([\\`*_\[\]<>|~&])")
_BACKTICKS = re.compile(r"`+")
_CODE_SPAN = re.compile(r"(`[^`]+`)")
# What GitHub turns into a link, a mention or a character in prose (GFM autolinks; @-mentions and
# issue references; character references): shown in a code span instead.
_LIVE = re.compile(
    r"&#?[A-Za-z0-9]+;"  # a character reference (decoded: `&#x202E;` is a bidi override)
    r"|\b[A-Za-z][A-Za-z0-9+.\-]*://\S+"  # a URL
    r"|\bwww\.\S+"  # GFM's www. autolink
    r"|[\w.+\-]+@[\w\-]+(?:\.[\w\-]+)+"  # an e-mail address (autolinked)
    # @user, @org/team; an address after an `@` (`GPU 0 @192.0.2.2:8000`) stays whole in the span
    r"|(?<![\w`])@[A-Za-z0-9][A-Za-z0-9\-]*(?:[.:][A-Za-z0-9\-]+)*(?:/[A-Za-z0-9_.\-]+)?"
    r"|\b[\w.\-]+/[\w.\-]+#\d+\b|(?<![\w&])#\d+\b"  # org/repo#12, #12
    r"|\bGH-\d+\b"
)


def render_markdown(diagnosis: Diagnosis) -> str:
    """The whole report as GitHub-flavoured markdown, ending in one newline (control characters
    of bundle text shown escaped: render/printable.py)."""
    diagnosis = printable_diagnosis(diagnosis)
    verdict = diagnosis.verdict
    steps = split_steps(verdict)
    parts = [_heading(verdict), _summary(verdict), _facts_table(diagnosis)]
    if verdict.culprits:
        parts.append(_culprits(verdict.culprits))
    if steps.top:
        parts.append(_steps("Next steps", steps.top, 1))
    if diagnosis.rows:
        parts.append(_processes(diagnosis.rows))
    if diagnosis.excerpt is not None:
        parts.append(_stack(diagnosis.excerpt))
    if verdict.findings:
        parts.append(_findings(verdict.findings))
    if steps.more:
        parts.append(_steps("More next steps", steps.more, steps.more_start))
    if verdict.blind_spots:
        parts.append(_spots(BLIND_SPOTS, verdict.blind_spots))
    parts.append(_footer())
    return "\n\n".join(parts) + "\n"


def render_markdown_brief(diagnosis: Diagnosis) -> str:
    """`--brief` as markdown: the verdict, the culprits and why, the top next steps and the blind
    spots that could change the verdict (Diagnosis.doubts)."""
    diagnosis = printable_diagnosis(diagnosis)
    verdict = diagnosis.verdict
    parts = [_heading(verdict), _summary(verdict), _facts_table(diagnosis)]
    if verdict.culprits:
        parts.append(_culprits(verdict.culprits, reasons=1))
    if top := split_steps(verdict).top:
        parts.append(_steps("Next steps", top, 1))
    if diagnosis.doubts:
        parts.append(_spots("Blind spots that could change this verdict", diagnosis.doubts))
    if others := len(verdict.blind_spots) - len(diagnosis.doubts):
        parts.append(f"{others} other blind spot(s): the full report (without --brief) lists them.")
    parts.append(_footer())
    return "\n\n".join(parts) + "\n"


def _summary(verdict: Verdict) -> str:
    """The summary in bold, with the rule that decided it (`extra.summary_by`: provenance)."""
    by = verdict.extra.get("summary_by")
    return f"**{_text(verdict.summary)}**" + (f" · by {_code(by)}" if isinstance(by, str) else "")


def _steps(title: str, steps: tuple[str, ...], first: int) -> str:
    """`first.` onwards: a list that starts at 4 keeps its numbers (CommonMark's start number)."""
    lines = [f"{i}. {_text(step)}" for i, step in enumerate(steps, first)]
    return "\n".join([f"### {title}", "", *lines])


def _spots(title: str, spots: tuple[str, ...]) -> str:
    return "\n".join([f"### {title}", "", *(f"- {_text(spot)}" for spot in spots)])


def _footer() -> str:
    return f"---\n<sub>slime-hangdoctor {__version__} · schema `{SCHEMA}`</sub>"


def _text(value: str) -> str:
    """One line of prose or a table cell: markdown syntax escaped, newlines folded.

    Paired `backtick` spans (commands in next steps) stay code spans; everything else is literal.
    """
    pieces = _CODE_SPAN.split(" ".join(value.split()))
    return "".join(
        piece.replace("|", "\\|") if index % 2 else _prose(piece)
        for index, piece in enumerate(pieces)
    )


def _prose(value: str) -> str:
    """Text outside code spans: markdown syntax escaped, what GitHub would make live in a code
    span (`_LIVE`)."""
    out: list[str] = []
    pos = 0
    for m in _LIVE.finditer(value):
        out += (_SPECIAL.sub(r"\\\1", value[pos : m.start()]), _code(m.group()))
        pos = m.end()
    out.append(_SPECIAL.sub(r"\\\1", value[pos:]))
    return "".join(out)


def _code(value: str) -> str:
    """An inline code span that survives backticks inside and `|` in a table cell."""
    value = " ".join(value.split())
    ticks = "`" * (max((len(run) for run in _BACKTICKS.findall(value)), default=0) + 1)
    pad = " " if value.startswith("`") or value.endswith("`") else ""
    return f"{ticks}{pad}{value}{pad}{ticks}".replace("|", "\\|")


def _fence(lines: list[str], indent: str = "") -> str:
    """A fenced `text` block longer than any backtick run in `lines`."""
    longest = max((len(run) for line in lines for run in _BACKTICKS.findall(line)), default=0)
    fence = "`" * max(3, longest + 1)
    body = [f"{fence}text", *lines, fence]
    return "\n".join(f"{indent}{line}" if line else line for line in body)


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = [f"| {' | '.join(header)} |", f"|{'|'.join('---' for _ in header)}|"]
    lines += [f"| {' | '.join(row)} |" for row in rows]
    return "\n".join(lines)


def _heading(verdict: Verdict) -> str:
    if verdict.stage is Stage.NONE:
        return f"## {headline(verdict)}"
    return f"## {headline(verdict)} (stage `{verdict.stage.value}`)"


def _facts_table(diagnosis: Diagnosis) -> str:
    facts = [("status", diagnosis.verdict.status.value), *report_facts(diagnosis)]
    cells = [_code(value) if label == "stage" else _text(value) for label, value in facts]
    return _table([label for label, _ in facts], [cells])


def _culprits(culprits: tuple[Culprit, ...], reasons: int | None = None) -> str:
    """The culprits' table; `reasons`: each culprit's first reasons only (the brief report)."""
    details = [dict(culprit_details(c)) for c in culprits]
    labels = [label for label in ("node", "pid", "rank", "GPU") if any(label in d for d in details)]
    ids = [label for label in ("engine", "actor") if any(label in d for d in details)]
    header = ["culprit", *labels, *ids, "why"]
    rows = [
        [
            _text(culprit_name(c)),
            *(_text(d.get(label, "")) for label in labels),
            *(_code(d[label]) if label in d else "" for label in ids),
            _text(" | ".join(c.why.split(" | ")[:reasons])),
        ]
        for c, d in zip(culprits, details, strict=True)
    ]
    title = "### Culprit" if len(culprits) == 1 else f"### Culprits ({len(culprits)})"
    return f"{title}\n\n{_table(header, rows)}"


def _processes(rows: tuple[RoleRow, ...]) -> str:
    """The process table; in a large job alike processes are grouped (render/rows.py)."""
    marked = any(row.culprit for row in rows)
    shown = shown_rows(rows)
    header = ["process", "node", "pid", "stage", "state"]
    body = [
        [
            _text(group_label(item)),
            _text(group_node(item)),
            "-" if item.row.pid is None or item.count > 1 else str(item.row.pid),
            f"`{item.row.stage.value}`",
            _text(item.row.state),
        ]
        for item in shown.rows
    ]
    if marked:
        header.insert(0, "")
        for item, cells in zip(shown.rows, body, strict=True):
            cells.insert(0, MARKER if item.row.culprit else "")
    title = f"### Processes ({_text(table_note(shown))})" if shown.grouped else "### Processes"
    return f"{title}\n\n{_table(header, body)}"


def _stack(excerpt: StackExcerpt) -> str:
    lines = [
        f"{MARKER if i in excerpt.highlight else ' '} {frame}"
        for i, frame in enumerate(excerpt.frames)
    ]
    parts = [
        f"### Stack of {_text(excerpt.title)}, innermost first",
        _fence(lines or ["(no frames)"]),
    ]
    if excerpt.highlight:
        parts.append(f"{MARKER} marks the frames that decided the verdict.")
    return "\n\n".join(parts)


def _findings(findings: tuple[Finding, ...]) -> str:
    items = []
    for finding in findings:
        by = f" · by {_code(finding.by)}" if finding.by else ""  # provenance: the rule that made it
        item = f"- **{finding.severity.value.upper()}** {_text(finding.message)} ({_code(finding.rule)}{by})"
        if finding.evidence:
            lines = [line for entry in finding.evidence for line in entry.splitlines() or [""]]
            item += "\n\n" + _fence(lines, indent="  ")
        items.append(item)
    return "### Findings\n\n" + "\n\n".join(items)
