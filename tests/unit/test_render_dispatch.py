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
    with pytest.raises(UsageError, match="choose one of: text, json, markdown, html"):
        _output("yaml", width=100)
    assert FORMATS == ("text", "json", "markdown", "html")


def test_a_json_report_loads_no_rich_and_is_what_rich_wrote() -> None:
    """`--json` (what a cron `check --json` prints) is written without importing rich, ~45 ms of
    CPU of every run (issue 26): in a fresh interpreter, `analyse BUNDLE --json` of a recorded
    bundle leaves no rich module loaded, and prints exactly what rich's `Console.out` of the same
    report prints."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from slime_hangdoctor.pipeline import analyse_bundle
    from slime_hangdoctor.verdict import ReportFormat

    bundle = Path(__file__).resolve().parents[1] / "fixtures/bundles/gpu-h200-broadcast-hang"
    code = (
        "import sys\n"
        "from slime_hangdoctor.cli import main\n"
        "rc = main(['analyse', sys.argv[1], '--json'])\n"
        "loaded = sorted(m for m in sys.modules if m == 'rich' or m.startswith('rich.'))\n"
        "print(rc, loaded, file=sys.stderr)\n"
    )
    root = str(Path(__file__).resolve().parents[2])
    proc = subprocess.run(
        [sys.executable, "-c", code, str(bundle)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=root,
        env={**os.environ, "PYTHONPATH": root},
    )
    diagnosis = analyse_bundle(bundle).diagnosis
    rc = int(diagnosis.verdict.exit_code)
    assert proc.stderr.strip().splitlines()[-1] == f"{rc} []", proc.stderr[-2000:]
    console = Console(soft_wrap=False, file=io.StringIO(), width=40)
    with console.capture() as capture:
        render(diagnosis, ReportFormat.JSON, console)
    assert proc.stdout == capture.get()
