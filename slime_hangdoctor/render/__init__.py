"""Renderers: a `Diagnosis` as a terminal report (rich), markdown for an issue, JSON, or one
self-contained HTML page (render/html.py, with the wait-for graph).

`render(diagnosis, fmt, console)` is what the CLI calls for `--format text|json|markdown|html`.
JSON and markdown are written verbatim (no wrapping, no markup, no highlighting), so they can be
piped into `jq` or pasted into an issue. rich is imported only by the terminal report
(`render_terminal`, loaded when first asked for): a JSON report (`render_json`, what a cron
`check --json` prints) costs no rich.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from slime_hangdoctor.errors import UsageError
from slime_hangdoctor.render.jsonout import render_json, report_json
from slime_hangdoctor.render.markdown import render_markdown, render_markdown_brief
from slime_hangdoctor.verdict import Diagnosis, ReportFormat

if TYPE_CHECKING:
    from rich.console import Console

    from slime_hangdoctor.render.terminal import render_terminal

__all__ = [
    "BRIEF_FORMATS",
    "FORMATS",
    "check_brief",
    "render",
    "render_json",
    "render_markdown",
    "render_terminal",
    "render_text",
    "report_json",
]

FORMATS = tuple(f.value for f in ReportFormat)
BRIEF_FORMATS = (ReportFormat.TEXT, ReportFormat.MARKDOWN)  # `--brief`: reports read by a person


def __getattr__(name: str) -> Any:
    """`render_terminal`, imported (with rich) on first use."""
    if name == "render_terminal":
        from slime_hangdoctor.render.terminal import render_terminal

        return render_terminal
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def render_text(
    diagnosis: Diagnosis,
    fmt: ReportFormat | str,
    brief: bool = False,
    time_left_s: float | None = None,
) -> str:
    """The report in a format written verbatim (json, markdown, html), as one text; `brief`: the
    one-screen report (markdown only of these). `time_left_s`: what is left of the run's deadline
    (bounds the HTML graph's layout; None where the run has none, as `analyse`).

    Raises:
        UsageError: `fmt` is text (rich lays it out for a console) or not one of FORMATS, or
            `brief` with a format that has no brief form.
    """
    if brief:
        check_brief(fmt)
    if fmt == ReportFormat.JSON:
        return render_json(diagnosis) + "\n"
    if fmt == ReportFormat.MARKDOWN:
        return render_markdown_brief(diagnosis) if brief else render_markdown(diagnosis)
    if fmt == ReportFormat.HTML:
        from slime_hangdoctor.render.html import render_html

        return render_html(diagnosis, time_left_s=time_left_s)
    raise UsageError(f"format {fmt!r} is not written as a file; choose json, markdown or html")


def check_brief(fmt: ReportFormat | str) -> None:
    """`--brief` is given with a format that has a brief form (BRIEF_FORMATS), or UsageError."""
    if fmt not in BRIEF_FORMATS:
        raise UsageError(
            f"--brief is a report for a person: use it with --format text or markdown, "
            f"not {ReportFormat(fmt).value}"
            if fmt in FORMATS
            else f"unknown report format {fmt!r}; choose one of: {', '.join(FORMATS)}"
        )


def render(
    diagnosis: Diagnosis,
    fmt: ReportFormat | str,
    console: Console,
    brief: bool = False,
    time_left_s: float | None = None,
) -> None:
    """Write `diagnosis` to `console` in `fmt` (a ReportFormat or its value); `brief` and
    `time_left_s` as `render_text`'s (the one-screen report: text and markdown, BRIEF_FORMATS).

    Raises:
        UsageError: `fmt` is not one of FORMATS, or `brief` with a format that has no brief form.
    """
    if brief:
        check_brief(fmt)
    if fmt == ReportFormat.TEXT:
        from slime_hangdoctor.render.terminal import render_brief, render_terminal

        (render_brief if brief else render_terminal)(diagnosis, console)
    elif fmt == ReportFormat.JSON:
        console.out(render_json(diagnosis), highlight=False)
    elif fmt == ReportFormat.MARKDOWN:
        console.out(render_text(diagnosis, fmt, brief), highlight=False, end="")
    elif fmt == ReportFormat.HTML:
        console.out(render_text(diagnosis, fmt, time_left_s=time_left_s), highlight=False, end="")
    else:
        raise UsageError(f"unknown report format {fmt!r}; choose one of: {', '.join(FORMATS)}")
