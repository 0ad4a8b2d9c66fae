"""The terminal report: verdict first, every culprit / step / blind spot shown, 100 columns, plain
text without a tty or with NO_COLOR."""

from __future__ import annotations

import io
import re
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.cells import cell_len
from rich.console import Console

from slime_hangdoctor.render import render_terminal
from slime_hangdoctor.verdict import (
    Culprit,
    Diagnosis,
    Finding,
    NextStep,
    Role,
    Severity,
    StackExcerpt,
    Status,
)
from tests.unit.render_diagnoses import (
    FIXTURES,
    GOLDEN,
    all_diagnoses,
    hung_diagnosis,
    terminal_text,
)

EXAMPLES = all_diagnoses()
SGR = re.compile(r"\x1b\[([0-9;]*)m")
# A real frame location from slime's weight sync, as a deep site-packages path makes it.
LONG_FRAME = (
    "_update_bucket_weights_from_distributed (/usr/local/lib/python3.12/dist-packages/slime/"
    "backends/megatron_utils/update_weight/update_weight_from_distributed.py:302)"
)


def _flat(text: str) -> str:
    """The report's words in one line: panel borders dropped, wrapping undone."""
    return " ".join(text.replace("│", " ").split())


def _words(value: str) -> str:
    return " ".join(value.split())


@pytest.mark.parametrize("name", sorted(EXAMPLES))
@pytest.mark.parametrize("width", [100, 80, 60])
def test_no_line_wider_than_the_console(name: str, width: int) -> None:
    """A line that wraps in the terminal scrambles tables and stacks."""
    # GIVEN / WHEN
    text = terminal_text(EXAMPLES[name], width=width)
    # THEN
    assert max(cell_len(line) for line in text.splitlines()) <= width


@settings(max_examples=60, deadline=None)
@given(words=st.text(max_size=160), width=st.integers(min_value=20, max_value=140))
def test_any_text_from_the_job_stays_inside_the_width(words: str, width: int) -> None:
    """Wide characters, tabs, control codes or one endless token in a frame or a log line must
    not push a line past the edge."""
    # GIVEN: the hung example with every free-text field replaced by `words`
    base = EXAMPLES["hung"]
    verdict = replace(
        base.verdict,
        summary=words,
        culprits=(Culprit(Role.DRIVER, words, pid=1, engine_url=words),),
        findings=(Finding("r", Severity.INFO, words, (words,)),),
        next_steps=(NextStep(why=words),),
        blind_spots=(words,),
    )
    excerpt = StackExcerpt(words, (words, f"{words} ({words}:1)"), (0,))
    # WHEN
    text = terminal_text(replace(base, verdict=verdict, excerpt=excerpt), width=width)
    # THEN
    assert all(cell_len(line) <= min(width, 100) for line in text.splitlines())


def test_never_wider_than_100_columns_on_a_wide_terminal() -> None:
    """Long summaries stay readable on a 200-column screen."""
    text = terminal_text(EXAMPLES["hung"], width=200)
    assert max(cell_len(line) for line in text.splitlines()) <= 100


@pytest.mark.parametrize(
    ("name", "first"),
    [
        ("hung", "HUNG in weight-sync NCCL broadcast"),
        ("progressing", "PROGRESSING"),
        ("idle", "IDLE"),
        ("unknown", "UNKNOWN"),
    ],
)
def test_verdict_line_comes_first(name: str, first: str) -> None:
    """At 3 a.m. the first line must say what is wrong; the summary follows at once."""
    # GIVEN
    diagnosis = EXAMPLES[name]
    # WHEN
    lines = terminal_text(diagnosis).splitlines()
    # THEN
    assert first in lines[0]
    assert _words(diagnosis.verdict.summary) in _flat("\n".join(lines[:4]))


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_every_culprit_next_step_and_blind_spot_is_shown(name: str) -> None:
    """Nothing the analysis concluded may be dropped by the layout."""
    # GIVEN
    verdict = EXAMPLES[name].verdict
    # WHEN
    flat = _flat(terminal_text(EXAMPLES[name]))
    # THEN
    for culprit in verdict.culprits:
        assert _words(culprit.why) in flat
        for value in (culprit.node_ip, culprit.pid, culprit.engine_url, culprit.actor_id):
            if value is not None:
                assert str(value) in flat
    for item in (*verdict.step_texts, *verdict.blind_spots):
        assert _words(item) in flat
    for finding in verdict.findings:
        assert _words(finding.message) in flat
        assert all(_words(e) in flat for e in finding.evidence)


def test_next_steps_are_numbered_in_order() -> None:
    """On-call runbooks refer to steps by number."""
    text = terminal_text(EXAMPLES["hung"])
    starts = [re.search(rf"^\s+{i}\. ", text, re.MULTILINE) for i in (1, 2, 3, 4)]
    assert all(starts)
    assert [m.start() for m in starts if m] == sorted(m.start() for m in starts if m)


def test_culprit_row_is_marked_in_the_process_table() -> None:
    """Without colour the marker is the only thing that singles out the culprit process."""
    # GIVEN / WHEN
    lines = terminal_text(EXAMPLES["hung"]).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Processes"))
    table = lines[start:]
    # THEN
    rank1 = next(line for line in table if "train rank 1" in line)
    rank0 = next(line for line in table if "train rank 0" in line)
    assert rank1.lstrip().startswith("▶") and "572" in rank1
    assert not rank0.lstrip().startswith("▶")


def test_stack_excerpt_is_innermost_first_with_the_deciding_frame_marked() -> None:
    """The frame the verdict rests on must be the one the eye lands on."""
    # GIVEN
    excerpt = EXAMPLES["hung"].excerpt
    assert excerpt is not None
    # WHEN
    lines = terminal_text(EXAMPLES["hung"]).splitlines()
    # THEN (the stack's own lines: a next step above it may name a frame too)
    lines = lines[next(i for i, line in enumerate(lines) if line.startswith("Stack of")) :]
    rows = [next(i for i, line in enumerate(lines) if frame in line) for frame in excerpt.frames]
    assert rows == sorted(rows)
    assert lines[rows[0]].strip() == f"▶ {excerpt.frames[0]}"
    assert not lines[rows[1]].strip().startswith("▶")


def test_long_frame_is_cut_in_the_middle_keeping_function_and_line() -> None:
    """A deep site-packages path must not wrap, and must keep `function` and `file:line`."""
    # GIVEN
    excerpt = StackExcerpt(title="train rank 0 (pid 571)", frames=(LONG_FRAME,), highlight=(0,))
    diagnosis = replace(EXAMPLES["hung"], excerpt=excerpt)
    # WHEN
    line = next(x for x in terminal_text(diagnosis).splitlines() if "…" in x)
    # THEN
    assert cell_len(line) <= 100
    assert line.strip().startswith("▶ _update_bucket_weights_from_distributed (/usr/")
    assert line.endswith("update_weight_from_distributed.py:302)")


def test_brackets_in_log_lines_print_literally() -> None:
    """A rank's log line looks like rich markup; it must not be eaten as a tag."""
    # GIVEN: the real line rank 1 printed when the flight recorder dumped
    log_line = (FIXTURES / "run3_hang.1.log").read_text().splitlines()[1]
    finding = Finding(
        "logs.fr_dump", Severity.INFO, "Rank 1 dumped its flight recorder.", (log_line,)
    )
    diagnosis = _with_findings(EXAMPLES["hung"], finding)
    # WHEN
    flat = _flat(terminal_text(diagnosis, width=100))
    # THEN
    assert "[rank1]:[E1129 22:06:18.468671222 ProcessGroupNCCL.cpp:1628] [PG ID 0" in flat


def test_plain_text_without_a_tty() -> None:
    """Piped into a file or a ticket, the report has no escape codes."""
    console = Console(width=100, force_terminal=False, file=io.StringIO())
    with console.capture() as capture:
        render_terminal(EXAMPLES["hung"], console)
    assert "\x1b" not in capture.get()


def test_no_color_keeps_emphasis_but_drops_colour(monkeypatch: pytest.MonkeyPatch) -> None:
    """NO_COLOR (no-color.org) is honoured: no colour codes on a colour terminal."""
    # GIVEN
    monkeypatch.setenv("NO_COLOR", "1")
    console = Console(width=100, force_terminal=True, color_system="standard", file=io.StringIO())
    # WHEN
    with console.capture() as capture:
        render_terminal(EXAMPLES["hung"], console)
    # THEN
    params = {p for codes in SGR.findall(capture.get()) for p in codes.split(";")}
    assert params, "bold should still be emitted"
    assert not params & {str(c) for c in (*range(30, 38), *range(90, 98), 38)}


@pytest.mark.parametrize(
    ("status", "code"),
    [(Status.HUNG, "31"), (Status.PROGRESSING, "32"), (Status.IDLE, "34"), (Status.UNKNOWN, "33")],
)
def test_status_colour_on_the_verdict_line(status: Status, code: str) -> None:
    """HUNG red, PROGRESSING green, IDLE blue, UNKNOWN yellow."""
    # GIVEN
    by_status = {d.verdict.status: d for d in EXAMPLES.values()}
    console = Console(
        width=100, force_terminal=True, color_system="standard", no_color=False, file=io.StringIO()
    )
    # WHEN
    with console.capture() as capture:
        render_terminal(by_status[status], console)
    # THEN
    first = capture.get().splitlines()[0]
    assert code in {p for codes in SGR.findall(first) for p in codes.split(";")}


def test_ascii_only_terminal_gets_ascii_markers_and_boxes() -> None:
    """With a non-UTF-8 stdout (LANG=C on an old node) the report must still encode."""

    class AsciiFile(io.StringIO):
        encoding = "ascii"

    console = Console(width=100, force_terminal=False, file=AsciiFile())
    with console.capture() as capture:
        render_terminal(EXAMPLES["engine_culprit"], console)
    text = capture.get()
    text.encode("ascii")
    assert "> train rank 1" in text


def test_suspected_hang_says_so() -> None:
    """A hang not yet past the stall threshold is reported as suspected (exit 1)."""
    verdict = replace(EXAMPLES["hung"].verdict, suspected=True)
    first = terminal_text(replace(EXAMPLES["hung"], verdict=verdict)).splitlines()[0]
    assert "HUNG (suspected)" in first
    assert "exit 1 (warning)" in _flat(terminal_text(replace(EXAMPLES["hung"], verdict=verdict)))


def test_empty_sections_are_left_out() -> None:
    """No culprit heading for a healthy job, no stack heading without a stack."""
    text = terminal_text(EXAMPLES["unknown"])
    for heading in ("Culprit", "Processes", "Stack of", "Findings"):
        assert heading not in text


@pytest.mark.parametrize(
    ("golden", "name"),
    [("terminal_hung.txt", "hung"), ("terminal_progressing.txt", "progressing")],
)
def test_matches_golden(golden: str, name: str) -> None:
    """Any change to the layout shows up as a reviewed diff of the golden file."""
    expected = (GOLDEN / golden).read_text(encoding="utf-8")
    assert terminal_text(EXAMPLES[name]) == expected, (
        "terminal report changed: run `python scripts/make_screenshots.py` and review the diff"
    )


def test_builders_use_the_real_fixture_stack() -> None:
    """The example stack is rank 1's real py-spy stack from the 2x H200 hang."""
    excerpt = hung_diagnosis().excerpt
    assert excerpt is not None
    raw = Path(FIXTURES / "run3_hang.pyspy.json.txt").read_text()
    assert excerpt.frames[0] == "never_join (nccl_hang.py:11)"
    assert '"name": "never_join"' in raw and '"line": 11' in raw


def _with_findings(diagnosis: Diagnosis, *extra: Finding) -> Diagnosis:
    verdict = replace(diagnosis.verdict, findings=(*diagnosis.verdict.findings, *extra))
    return replace(diagnosis, verdict=verdict)


def test_control_sequences_from_a_bundle_never_reach_the_terminal() -> None:
    """Issue 15 point 15: frame names, log lines and reasons come from the job (and, for
    `analyse`, from a stranger's bundle). An ESC or C1 CSI in them (retitle the window, clear the
    screen, hide text) is shown escaped, in the text and markdown reports alike."""
    from dataclasses import replace

    from rich.console import Console

    from slime_hangdoctor.render import render
    from tests.unit.render_diagnoses import hung_diagnosis

    evil = "\x1b]0;pwned\x07\x1b[2J\x9b31m\u202etxt.exe"
    base = hung_diagnosis()
    assert base.excerpt is not None
    frames = (f"step{evil} (x.py:1)", *base.excerpt.frames)
    verdict = replace(base.verdict, summary=f"summary {evil}", blind_spots=(f"log: {evil}",))
    diagnosis = replace(base, verdict=verdict, excerpt=replace(base.excerpt, frames=frames))
    for fmt in ("text", "markdown"):
        console = Console(width=100, force_terminal=False, no_color=True)
        with console.capture() as capture:
            render(diagnosis, fmt, console)
        out = capture.get()
        for bad in ("\x1b", "\x07", "\x9b", "\u202e"):
            assert bad not in out, (fmt, bad)
        assert "\\x1b]0;pwned" in out, fmt


# Issue 22 point 11: characters that pass a list of control characters but are no printable
# text: line and paragraph separators (a one-line status in two), zero-width and format
# characters (hide or reorder text), a byte that was not UTF-8 (a lone surrogate), a tag
# character outside the BMP, spaces other than the space (Zs), and C0 / C1 controls.
UNPRINTABLE = "\u2028\u2029\u200b\u061c\ufeff\u2060\udcff\U000e0041\u00a0\u3000\x1b[2J\x9b\x85"
PRINTABLE_TEXT = "rank 模型 é █▌ ok"  # no-ASCII text that is printable stays as it is


def _evil(diagnosis: Diagnosis, text: str) -> Diagnosis:
    assert diagnosis.excerpt is not None
    frames = (f"step{text} (x.py:1)", *diagnosis.excerpt.frames)
    verdict = replace(diagnosis.verdict, summary=f"summary {text}", blind_spots=(f"log: {text}",))
    return replace(diagnosis, verdict=verdict, excerpt=replace(diagnosis.excerpt, frames=frames))


def test_every_unprintable_character_is_escaped_in_the_reports() -> None:
    """Every character `str.isprintable` refuses (Cc, Cf, Cs, Co, Cn, Zl, Zp) reaches the
    text and markdown reports as a visible escape, printable Unicode text unchanged."""
    from slime_hangdoctor.render import render

    diagnosis = _evil(hung_diagnosis(), UNPRINTABLE + PRINTABLE_TEXT)
    for fmt in ("text", "markdown"):
        console = Console(width=100, force_terminal=False, no_color=True)
        with console.capture() as capture:
            render(diagnosis, fmt, console)
        out = capture.get()
        bad = sorted({c for c in out if not c.isprintable() and c not in "\n"})
        assert not bad, (fmt, [hex(ord(c)) for c in bad])
        for escaped in ("\\u2028", "\\u200b", "\\u061c", "\\udcff", "\\U000e0041", "\\x1b"):
            assert escaped in out, (fmt, escaped)
        assert "模型 é █▌ ok" in out, fmt


def test_the_watch_status_line_is_one_printable_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`watch` prints one status line per run with the verdict's summary (which quotes the job)
    and a warning line per note: each stays one line, every unprintable character escaped,
    newlines too (a summary holding `\\n2026-... exit=0 status=ok` would forge a run)."""
    from slime_hangdoctor import cli
    from slime_hangdoctor.verdict import ExitCode
    from slime_hangdoctor.watchdog import run as watchdog

    forged = "\n2026-12-01T00:00:00 exit=0 status=ok stage=unknown all fine"
    diagnosis = _evil(hung_diagnosis(), UNPRINTABLE + PRINTABLE_TEXT + forged)
    result = watchdog.CheckResult(diagnosis, ExitCode.CRITICAL, notes=(f"note {UNPRINTABLE}",))
    monkeypatch.setattr(watchdog, "run_check", lambda address, opts, check, carried=None: result)
    rc = cli.main(["watch", "--max-runs", "1", "--state-file", str(tmp_path / "state.json")])
    out, err = capsys.readouterr()
    assert rc == int(ExitCode.CRITICAL)
    assert out.count("\n") == 1 and out.endswith("\n") and "exit=2" in out
    assert err.count("\n") == 1 and err.startswith("  warning: note ")
    for line in (out, err):
        bad = sorted({c for c in line[:-1] if not c.isprintable()})
        assert not bad, [hex(ord(c)) for c in bad]
        assert "\\u2028" in line and "\\x1b" in line
    assert "模型 é █▌ ok\\x0a2026-12-01T00:00:00 exit=0" in out


def test_an_error_message_naming_a_strangers_file_is_printable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`analyse` of an attachment whose name (chosen by whoever filed the report) holds a line
    separator, a zero-width space and an ESC sequence: the error names it escaped."""
    from slime_hangdoctor import cli

    name = tmp_path / f"bundle{UNPRINTABLE}.tar.gz"
    rc = cli.main(["analyse", str(name)])
    err = capsys.readouterr().err
    assert rc != 0 and "does not exist" in " ".join(err.split())
    bad = sorted({c for c in err if not c.isprintable() and c != "\n"})
    assert not bad, [hex(ord(c)) for c in bad]
    flat = "".join(err.split())  # the message wraps at the terminal's width, inside a long path
    assert "\\u2028" in flat and "\\x1b" in flat
