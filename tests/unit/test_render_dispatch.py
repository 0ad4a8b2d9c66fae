"""`render(diagnosis, fmt, console)`: the one call the CLI makes for --format text|json|markdown."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from slime_hangdoctor.errors import UsageError
from slime_hangdoctor.render import FORMATS, render, render_markdown, report_json
from tests.unit.render_diagnoses import all_diagnoses, terminal_text

EXAMPLES = all_diagnoses()


def _output(fmt: str, width: int, *, terminal: bool = False) -> str:
    console = Console(
        width=width,
        force_terminal=terminal,
        color_system="standard" if terminal else "auto",
        file=io.StringIO(),
    )
    with console.capture() as capture:
        render(EXAMPLES["engine_culprit"], fmt, console)
    return capture.get()


@pytest.mark.parametrize("terminal", [False, True])
def test_json_is_written_verbatim_even_on_a_narrow_colour_terminal(terminal: bool) -> None:
    """`| jq` must get valid JSON: no wrapping at the console width, no highlighting codes."""
    text = _output("json", width=40, terminal=terminal)
    assert "\x1b" not in text
    assert json.loads(text) == report_json(EXAMPLES["engine_culprit"])


def test_markdown_is_written_verbatim() -> None:
    """The pasted markdown is exactly `render_markdown`, lines unwrapped."""
    assert _output("markdown", width=40) == render_markdown(EXAMPLES["engine_culprit"])


def test_text_is_the_terminal_report() -> None:
    assert _output("text", width=100) == terminal_text(EXAMPLES["engine_culprit"])


def test_unknown_format_is_a_usage_error() -> None:
    """A typo in --format becomes a clear message and exit 3, not a traceback."""
    with pytest.raises(UsageError, match="choose one of: text, json, markdown"):
        _output("yaml", width=100)
    assert FORMATS == ("text", "json", "markdown")
