"""The markdown report: pasted into a GitHub issue, it must render as written and lose nothing."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from slime_hangdoctor import __version__
from slime_hangdoctor.render import render_markdown
from slime_hangdoctor.verdict import SCHEMA, Finding, Severity, StackExcerpt
from tests.unit.render_diagnoses import FIXTURES, GOLDEN, all_diagnoses

EXAMPLES = all_diagnoses()


def _unescaped(markdown: str) -> str:
    """The text a reader sees: backslash escapes undone, code spans shown as their text (a URL,
    `#1`, `@team` are put in one so that GitHub leaves them text), whitespace folded."""
    return " ".join(re.sub(r"\\(.)", r"\1", markdown).replace("`", "").split())


def _words(value: str) -> str:
    return " ".join(value.replace("`", "").split())


def _fenced_blocks(markdown: str) -> list[list[str]]:
    blocks: list[list[str]] = []
    current: list[str] | None = None
    for line in markdown.splitlines():
        stripped = line.strip()
        if stripped.startswith("```"):
            if current is None:
                current = []
            else:
                blocks.append(current)
                current = None
        elif current is not None:
            current.append(stripped)
    return blocks


@pytest.mark.parametrize(
    ("name", "heading"),
    [
        ("hung", "## HUNG in weight-sync NCCL broadcast (stage `nccl_broadcast`)"),
        ("progressing", "## PROGRESSING"),
        ("idle", "## IDLE"),
        ("unknown", "## UNKNOWN (stage `unknown`)"),
    ],
)
def test_starts_with_a_heading_of_status_and_stage(name: str, heading: str) -> None:
    """The issue title area says what is wrong before anything else."""
    lines = render_markdown(EXAMPLES[name]).splitlines()
    assert lines[0] == heading
    assert lines[2] == f"**{EXAMPLES[name].verdict.summary}**"


def test_culprit_and_process_tables() -> None:
    """The culprit and the per-role table are GitHub tables with a header separator."""
    # GIVEN / WHEN
    lines = render_markdown(EXAMPLES["engine_culprit"]).splitlines()
    # THEN
    header = lines.index("| culprit | node | pid | GPU | engine | actor | why |")
    assert lines[header + 1] == "|---|---|---|---|---|---|---|"
    assert lines[header + 2].startswith(
        "| train rank 1 | 192.0.2.2 | 572 | 1 |  |  | Rank 1 sleeps"
    )
    assert lines[header + 3].startswith(
        "| SGLang engine | 192.0.2.2 | 2217 | 2 | `http://192.0.2.2:15000` | "
        "`7d2f1c0a9be64e2f8c31a5d04e6b7f10a1b2c3d4` |"
    )
    processes = lines.index("|  | process | node | pid | stage | state |")
    assert lines[processes + 3].startswith("| ▶ | train rank 1 | 192.0.2.2 | 572 | `unknown` |")


def test_stack_excerpt_is_fenced_innermost_first_with_marker() -> None:
    """Frames like `<module>` must sit in a code block, not be eaten as HTML."""
    # GIVEN
    excerpt = EXAMPLES["hung"].excerpt
    assert excerpt is not None
    # WHEN
    blocks = _fenced_blocks(render_markdown(EXAMPLES["hung"]))
    # THEN
    assert blocks[0] == [
        "▶ never_join (nccl_hang.py:11)",
        "main (nccl_hang.py:58)",
        "<module> (nccl_hang.py:74)",
    ]


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_nothing_is_dropped(name: str) -> None:
    """Every culprit, finding, evidence line, next step and blind spot reaches the issue."""
    # GIVEN
    verdict = EXAMPLES[name].verdict
    # WHEN
    markdown = render_markdown(EXAMPLES[name])
    text = _unescaped(markdown)
    # THEN
    for culprit in verdict.culprits:
        assert _words(culprit.why) in text
    for finding in verdict.findings:
        assert _words(finding.message) in text and f"`{finding.rule}`" in markdown
        assert all(e in markdown for e in finding.evidence)
    for i, step in enumerate(verdict.step_texts, 1):
        assert f"{i}. " in markdown and _words(step) in text
    for spot in verdict.blind_spots:
        assert f"- {_words(spot)}" in text


def test_footer_names_tool_version_and_schema() -> None:
    """A pasted report must say which tool and contract version produced it."""
    last = render_markdown(EXAMPLES["idle"]).rstrip("\n").splitlines()[-1]
    assert __version__ in last and SCHEMA in last


def test_job_text_is_escaped_outside_code() -> None:
    """`<module>`, `[rank1]`, `*args` and `|` in prose must show literally, not as markup."""
    # GIVEN
    summary = "rank 1 in <module> printed [rank1] with *args | and a_b_c"
    verdict = replace(EXAMPLES["hung"].verdict, summary=summary)
    # WHEN
    markdown = render_markdown(replace(EXAMPLES["hung"], verdict=verdict))
    # THEN
    assert r"\<module\>" in markdown and r"\[rank1\]" in markdown
    assert r"\*args \| and a\_b\_c" in markdown


def test_backtick_commands_in_next_steps_stay_code() -> None:
    """`slime-hangdoctor check` in a next step renders as a command."""
    markdown = render_markdown(EXAMPLES["progressing"])
    assert "run `slime-hangdoctor check` again" in markdown


def test_log_line_evidence_is_verbatim_in_a_fence() -> None:
    """A real rank log line goes into the issue byte for byte."""
    # GIVEN
    log_line = (FIXTURES / "run3_hang.1.log").read_text().splitlines()[1]
    finding = Finding(
        "logs.fr_dump", Severity.INFO, "Rank 1 dumped its flight recorder.", (log_line,)
    )
    verdict = replace(EXAMPLES["hung"].verdict, findings=(finding,))
    # WHEN
    blocks = _fenced_blocks(render_markdown(replace(EXAMPLES["hung"], verdict=verdict)))
    # THEN
    assert [log_line] in blocks


def test_fence_outgrows_backticks_in_frames() -> None:
    """A frame with ``` inside cannot close the code block early."""
    excerpt = StackExcerpt(title="x", frames=("f (a```b.py:1)",))
    markdown = render_markdown(replace(EXAMPLES["idle"], excerpt=excerpt))
    assert "````text\n  f (a```b.py:1)\n````" in markdown


def test_matches_golden() -> None:
    """Any change to the markdown shows up as a reviewed diff of the golden file."""
    expected = (GOLDEN / "markdown_hung.md").read_text(encoding="utf-8")
    assert render_markdown(EXAMPLES["hung"]) == expected, (
        "markdown report changed: run `python scripts/make_screenshots.py` and review the diff"
    )


# ---------------------------------------------------------------- issue 32, point 6

# Text a job (or a bundle's author) controls, as a markdown reader on GitHub would act on it: a
# bidi override in each encoding GitHub decodes (character references, named and numeric), the
# invisible characters Python calls printable, a team mention, a user mention, issue references,
# bare links.
HOSTILE = (
    "engine &#x202E;kcatta&#x202C; &#8238;x &rlm;y &ZeroWidthSpace;z "
    "hangul\u3164filler braille\u2800blank vs\ufe0fsel "
    "cc @org/team and @someone, see org/repo#12 and #34, "
    "http://evil.example/x www.evil.example mail me@evil.example"
)


def _rendered_outside_code(markdown: str) -> str:
    """The HTML a CommonMark renderer (markdown-it, as rich's) makes of `markdown`, with every
    <code> element removed: the text GitHub would decode, autolink or mention-link."""
    from markdown_it import MarkdownIt

    html = MarkdownIt("commonmark").enable("table").render(markdown)
    return re.sub(r"<code[^>]*>.*?</code>", "", html, flags=re.DOTALL)


def test_what_github_would_decode_link_or_ping_stays_text() -> None:
    """Point 6: character references (`&#x202E;`, `&#8238;`, `&rlm;`) reached the issue and
    GitHub decoded them (a bidi override reverses what follows), `@org/team` pinged the team and
    bare URLs became links. Now `&` is escaped in prose, mentions, issue references and links sit
    in code spans, invisible characters are escaped: in the summary, a culprit's why, a finding,
    a blind spot and a table cell alike."""
    hung = EXAMPLES["hung"]
    culprit = replace(hung.verdict.culprits[0], why=HOSTILE)
    verdict = replace(
        hung.verdict,
        summary=HOSTILE,
        culprits=(culprit,),
        findings=(Finding("x", Severity.WARNING, HOSTILE, (HOSTILE,)),),
        blind_spots=(HOSTILE,),
    )
    markdown = render_markdown(replace(hung, verdict=verdict))
    outside = _rendered_outside_code(markdown)
    for decoded in ("\u202e", "\u202c", "\u200f", "\u200b", "\u3164", "\u2800", "\ufe0f"):
        assert decoded not in outside and decoded not in markdown, repr(decoded)
    for live in ("@org/team", "@someone", "org/repo#12", "#34", "http://evil", "www.evil",
                 "me@evil"):  # fmt: skip
        assert live not in outside, (live, outside)
    assert "`@org/team`" in markdown and "`http://evil.example/x`" in markdown
    assert "\\&#x202E;" in markdown or "`&#x202E;`" in markdown
    assert "\\u3164" in markdown  # shown, not hidden
    # nothing is dropped: the reader still sees every word
    seen = " ".join(re.sub(r"\\(.)", r"\1", markdown).replace("`", "").split())
    assert "kcatta" in seen and "org/repo#12" in seen and "me@evil.example" in seen
