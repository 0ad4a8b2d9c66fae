"""Action first, on every recorded bundle: each report (text, markdown, HTML) shows the top three
next steps right under the culprit, within the first screen; `--brief` is one screen (24 lines at
100 columns); a report says when the evidence was taken and how long the blocked call had run, not
the analysis time; stages and GPU states read as words; an address after an `@` stays whole.

The bundles are the recorded ones of tests/fixtures (real demo runs and real GPU runs), analysed
by today's code, once each per test session."""

from __future__ import annotations

import ast
import io
import re
from functools import cache
from pathlib import Path

import pytest
from rich.console import Console

from slime_hangdoctor.analysis.network import InFlightKind
from slime_hangdoctor.analysis.readers.nvml import GpuState
from slime_hangdoctor.pipeline import Analysed, analyse_bundle
from slime_hangdoctor.render import render, render_text
from slime_hangdoctor.render.html import render_html
from slime_hangdoctor.render.labels import TOP_STEPS, step_lines
from slime_hangdoctor.render.terminal import BRIEF_LINES, MAX_WIDTH
from slime_hangdoctor.verdict import Diagnosis, Stage, Status
from tests.html_dom import parse_dom
from tests.unit.test_golden_verdicts import BUNDLES

FIRST_SCREEN = 25  # lines: the action must be on them
# Values of the enums whose words reach prose (a stage, a GPU's state, a kind of in-flight
# evidence), and the cuda_spin state of `extra.gpus`: none may be spelled as a value in a sentence.
SNAKE_CASE_VALUES = tuple(
    e.value
    for kind in (Stage, GpuState, InFlightKind)
    for e in kind
    if "_" in e.value
) + ("kernel_spin",)
RENDER = Path(__file__).resolve().parents[2] / "slime_hangdoctor" / "render"
# The bundles issue 42 was written against (tree fa9a874: next steps at line 123 of 151, ...).
ISSUE_BUNDLES = (
    "demo-weight_sync_engine_missing",
    "demo-rollout_engine_stuck",
    "gpu-h200-broadcast-hang-fr",
    "gpu-h200-rank-killed-fr",
    "demo-actor_queue_cycle",
    "gpu-2xh200-nccl-broadcast-hang",
)


@cache
def analysed(name: str) -> Analysed:
    return analyse_bundle(BUNDLES[name])


def diagnosis_of(name: str) -> Diagnosis:
    return analysed(name).diagnosis


def text_report(diagnosis: Diagnosis, brief: bool = False, width: int = MAX_WIDTH) -> list[str]:
    console = Console(file=io.StringIO(), width=width, no_color=True, soft_wrap=False)
    render(diagnosis, "text", console, brief=brief)
    out = console.file.getvalue()
    assert isinstance(out, str)
    return out.splitlines()


def no_layout(source: str, seconds: float) -> tuple[str | None, str]:
    """The page's own fallback when Graphviz is missing (the graph as a list): the order of the
    sections is the same, and no `dot` runs per bundle."""
    return None, "Graphviz dot not used in this test"


def top_steps(diagnosis: Diagnosis) -> tuple[str, ...]:
    return step_lines(diagnosis.verdict)[:TOP_STEPS]


def test_the_issue_bundles_are_recorded() -> None:
    assert set(ISSUE_BUNDLES) <= set(BUNDLES)


@pytest.mark.parametrize("name", sorted(BUNDLES))
def test_text_report_shows_the_top_steps_on_the_first_screen(name: str) -> None:
    d = diagnosis_of(name)
    lines = text_report(d)
    steps = top_steps(d)
    if not steps:
        assert not any(line.startswith("Next steps") for line in lines)
        return
    first = lines.index("Next steps")
    assert first < FIRST_SCREEN
    for number, step in enumerate(steps, 1):
        row = next(i for i, line in enumerate(lines) if line.startswith(f"  {number}. "))
        assert first < row < FIRST_SCREEN, (name, number, row)
        assert lines[row][len(f"  {number}. ") :].split()[0] == step.split()[0]
    # right under the culprit: nothing but the verdict and the culprits comes before the steps
    titles = [line for line in lines[:first] if line and not line[0].isspace() and line[0].isalpha()]
    assert all(t.startswith("Culprit") for t in titles), titles


@pytest.mark.parametrize("name", sorted(BUNDLES))
def test_markdown_report_shows_the_top_steps_on_the_first_screen(name: str) -> None:
    d = diagnosis_of(name)
    lines = render_text(d, "markdown").splitlines()
    steps = top_steps(d)
    if not steps:
        return
    first = lines.index("### Next steps")
    headings = [line for line in lines[:first] if line.startswith("### ")]
    assert headings in ([], ["### Culprit"], [f"### Culprits ({len(d.verdict.culprits)})"])
    numbered = [i for i, line in enumerate(lines) if re.match(rf"[1-{TOP_STEPS}]\. ", line)]
    assert len(numbered) >= len(steps) and max(numbered[: len(steps)]) < FIRST_SCREEN


@pytest.mark.parametrize("name", sorted(BUNDLES))
def test_html_report_puts_the_steps_right_after_the_verdict_and_culprits(name: str) -> None:
    d = diagnosis_of(name)
    root = parse_dom(render_html(d, layout=no_layout))
    sections = [e.attrs.get("id") for e in root.find_all("section")]
    steps = top_steps(d)
    head = ["verdict", *(["culprits"] if d.verdict.culprits else [])]
    assert sections[: len(head)] == head
    if steps:
        assert sections[len(head)] == "next-steps"
        (section,) = [e for e in root.find_all("section") if e.attrs.get("id") == "next-steps"]
        items = [li.text for li in section.find_all("li")]
        assert len(items) == len(steps)
    more = step_lines(d.verdict)[TOP_STEPS:]
    if more:
        (rest,) = [e for e in root.find_all("section") if e.attrs.get("id") == "more-steps"]
        assert rest.find_all("ol")[0].attrs.get("start") == str(TOP_STEPS + 1)
        assert len(rest.find_all("li")) == len(more)
    else:
        assert "more-steps" not in sections


@pytest.mark.parametrize("name", sorted(BUNDLES))
def test_brief_is_one_screen(name: str) -> None:
    d = diagnosis_of(name)
    lines = text_report(d, brief=True)
    assert len(lines) <= BRIEF_LINES, "\n".join(lines)
    assert max(len(line) for line in lines) <= MAX_WIDTH
    for number, step in enumerate(top_steps(d), 1):
        assert any(line.startswith(f"  {number}. {step.split()[0]}") for line in lines)
    for doubt in d.doubts[:2]:
        assert any(line.startswith(f"  - {doubt[:40]}") for line in lines)


def test_brief_names_the_blind_spots_that_could_change_the_verdict() -> None:
    """The doubts are the verdict's own blind spots (a subset, in order); a bundle whose run had
    no Python stacks lists that one in the brief report."""
    for name in BUNDLES:
        d = diagnosis_of(name)
        assert set(d.doubts) <= set(d.verdict.blind_spots)
    with_doubts = [name for name in BUNDLES if diagnosis_of(name).doubts]
    assert with_doubts, "no recorded bundle has a blind spot that could change its verdict"
    d = diagnosis_of(with_doubts[0])
    assert "Blind spots that could change this verdict" in text_report(d, brief=True)
    markdown = render_text(d, "markdown", brief=True)
    assert "### Blind spots that could change this verdict" in markdown


def test_brief_is_refused_for_machine_formats() -> None:
    from slime_hangdoctor.errors import UsageError

    d = diagnosis_of("demo-rollout_engine_stuck")
    for fmt in ("json", "html"):
        with pytest.raises(UsageError, match="--brief"):
            render_text(d, fmt, brief=True)


def test_the_report_says_when_and_for_how_long_not_the_analysis_time() -> None:
    """The culprit's own Ray call where it runs one (the broadcast hang: rank 1's update_weights),
    else the job's oldest running call (a stuck engine runs none: the rollout's generate)."""
    analysed_ = analysed("gpu-h200-broadcast-hang-fr")
    d = analysed_.diagnosis
    assert d.taken_at == min(analysed_.manifest.sample_times)
    assert d.blocked_for is not None
    assert d.blocked_for.call == "MegatronTrainRayActor.update_weights (pid 2175)"
    assert "culprit's call" in d.blocked_for.source
    assert 0 < d.blocked_for.seconds < 60
    lines = text_report(d)
    assert not any("elapsed" in line for line in lines)
    assert any("taken 2026-" in line and "UTC" in line for line in lines)
    assert any(f"blocked for {d.blocked_for.seconds:.1f} s" in line for line in lines)
    stuck = diagnosis_of("demo-rollout_engine_stuck").blocked_for
    assert stuck is not None and stuck.call.startswith("RolloutManager.generate")
    assert "oldest running call" in stuck.source
    assert diagnosis_of("demo-slow").blocked_for is None  # not hung: no blocked call


@pytest.mark.parametrize("name", sorted(BUNDLES))
def test_stage_and_gpu_state_read_as_words(name: str) -> None:
    """The summary names the stage as the headline does; no GPU state's enum value in prose."""
    d = diagnosis_of(name)
    v = d.verdict
    if v.status is Status.HUNG:
        assert v.summary.startswith(f"Hung in {v.stage.label}") or "(stage unknown)" in v.summary
    prose = [v.summary, *(c.why for c in v.culprits), *(f.message for f in v.findings)]
    prose += [row.state for row in d.rows]
    for enum_value in SNAKE_CASE_VALUES:
        spelled = re.compile(rf"(?<![\w`\[/.]){re.escape(enum_value)}(?![\w`\](])")
        assert not any(spelled.search(text) for text in prose), (enum_value, name)


def test_an_address_after_an_at_sign_stays_whole_in_markdown() -> None:
    """`GPU 1 @192.0.2.2` (a real 2x H200 bundle's NVML reason) became `@192`.0.2.2: the mention
    guard cut the address. Every code span that starts with `@` and a digit holds the whole
    address, on every recorded bundle."""
    markdown = render_text(diagnosis_of("gpu-2xh200-nccl-broadcast-hang"), "markdown")
    assert "`@192.0.2.2`" in markdown
    for name in BUNDLES:
        markdown = render_text(diagnosis_of(name), "markdown")
        assert not re.search(r"`@\d[\w\-]*`[.:]\w", markdown), name


def test_only_labels_reads_next_steps() -> None:
    """Every renderer reads the steps through `step_lines` (render/labels.py), so a change of the
    steps' type is one change there."""
    readers = []
    for path in sorted(RENDER.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr == "next_steps":
                readers.append(path.name)
    assert set(readers) <= {"labels.py"}, readers


def test_brief_on_the_command_line(tmp_path: Path) -> None:
    """`analyse B --brief`: one screen at 100 columns and the verdict's exit code; to a file with
    -o as markdown; `--brief --json` refused (exit 3) with a message naming --brief."""
    import os
    import subprocess
    import sys

    bundle = BUNDLES["demo-rollout_engine_stuck"]
    env = {**os.environ, "COLUMNS": "100", "NO_COLOR": "1"}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "slime_hangdoctor", "analyse", str(bundle), *args]
        return subprocess.run(
            argv, check=False, capture_output=True, text=True, env=env, timeout=120
        )

    done = run("--brief")
    lines = done.stdout.splitlines()
    assert done.returncode == int(diagnosis_of("demo-rollout_engine_stuck").verdict.exit_code)
    assert 0 < len(lines) <= BRIEF_LINES and lines[0].startswith("╭─ HUNG")
    out = tmp_path / "brief.md"
    done = run("--brief", "-f", "markdown", "-o", str(out))
    assert "### Next steps" in out.read_text() and "### Processes" not in out.read_text()
    done = run("--brief", "--json")
    assert done.returncode == 3 and "--brief" in done.stderr and not done.stdout
