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
from slime_hangdoctor.render.markdown import render_markdown
from slime_hangdoctor.verdict import Diagnosis, ReportFormat

if TYPE_CHECKING:
    from rich.console import Console

    from slime_hangdoctor.render.terminal import render_terminal

__all__ = [
    "FORMATS",
    "render",
    "render_json",
    "render_markdown",
    "render_terminal",
    "render_text",
    "report_json",
]

FORMATS = tuple(f.value for f in ReportFormat)


def __getattr__(name: str) -> Any:
    """`render_terminal`, imported (with rich) on first use."""
    if name == "render_terminal":
        from slime_hangdoctor.render.terminal import render_terminal

        return render_terminal
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def render_text(
    diagnosis: Diagnosis, fmt: ReportFormat | str, time_left_s: float | None = None
) -> str:
    """The report in a format written verbatim (json, markdown, html), as one text.
    `time_left_s`: what is left of the run's deadline (bounds the HTML graph's layout; None
    where the run has none, as `analyse`).

    Raises:
        UsageError: `fmt` is text (rich lays it out for a console) or not one of FORMATS.
    """
    if fmt == ReportFormat.JSON:
        return render_json(diagnosis) + "\n"
    if fmt == ReportFormat.MARKDOWN:
        return render_markdown(diagnosis)
    if fmt == ReportFormat.HTML:
        from slime_hangdoctor.render.html import render_html

        return render_html(diagnosis, time_left_s=time_left_s)
    raise UsageError(f"format {fmt!r} is not written as a file; choose json, markdown or html")


def render(
    diagnosis: Diagnosis,
    fmt: ReportFormat | str,
    console: Console,
    time_left_s: float | None = None,
) -> None:
    """Write `diagnosis` to `console` in `fmt` (a ReportFormat or its value); `time_left_s` as
    `render_text`'s.

    Raises:
        UsageError: `fmt` is not one of FORMATS.
    """
    if fmt == ReportFormat.TEXT:
        from slime_hangdoctor.render.terminal import render_terminal

        render_terminal(diagnosis, console)
    elif fmt == ReportFormat.JSON:
        console.out(render_json(diagnosis), highlight=False)
    elif fmt == ReportFormat.MARKDOWN:
        console.out(render_markdown(diagnosis), highlight=False, end="")
    elif fmt == ReportFormat.HTML:
        console.out(render_text(diagnosis, fmt, time_left_s), highlight=False, end="")
    else:
        raise UsageError(f"unknown report format {fmt!r}; choose one of: {', '.join(FORMATS)}")
