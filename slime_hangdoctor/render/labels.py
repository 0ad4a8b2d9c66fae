"""Words shared by the reports (text, markdown, HTML, brief): status, stage, role and culprit
labels, the verdict's facts, and the next steps (`step_lines`, split by `split_steps`: the one
place a renderer reads them).

Stage words are the verdict's own table (`Stage.label`, verdict.py), which the analysis's summary
uses too, so a headline and its summary name a stage alike.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from slime_hangdoctor.verdict import Culprit, Diagnosis, Role, Stage, Status, Verdict

__all__ = [
    "TOP_STEPS",
    "culprit_details",
    "culprit_name",
    "exit_label",
    "headline",
    "report_facts",
    "role_label",
    "seconds",
    "stage_label",
    "split_steps",
    "status_word",
    "step_lines",
    "taken_label",
    "verdict_facts",
]

TOP_STEPS = 3  # the next steps every report shows right under the culprit

_ROLE_LABELS: dict[Role, str] = {
    Role.SGLANG_ENGINE: "SGLang engine",
    Role.TRAIN_RANK: "train rank",
    Role.ROLLOUT_MANAGER: "rollout manager",
    Role.DRIVER: "driver",
    Role.ROUTER: "router",
}


def status_word(verdict: Verdict) -> str:
    """`HUNG`, `HUNG (suspected)`, `PROGRESSING`, `IDLE` or `UNKNOWN`."""
    word = verdict.status.value.upper()
    if verdict.status is Status.HUNG and verdict.suspected:
        return f"{word} (suspected)"
    return word


def stage_label(stage: Stage) -> str:
    """A stage in words, e.g. `weight-sync NCCL broadcast`."""
    return stage.label


def step_lines(verdict: Verdict) -> tuple[str, ...]:
    """The next steps as the lines a report prints, most useful first. Every renderer reads the
    steps through this one function (the verdict's step type may grow fields; the line stays)."""
    return verdict.step_texts


@dataclass(frozen=True)
class StepSplit:
    """The next steps as every full report splits them: the top ones right under the culprit,
    the rest after the evidence, numbered on from `more_start`."""

    top: tuple[str, ...]
    more: tuple[str, ...]
    more_start: int = TOP_STEPS + 1


def split_steps(verdict: Verdict) -> StepSplit:
    steps = step_lines(verdict)
    return StepSplit(steps[:TOP_STEPS], steps[TOP_STEPS:])


def headline(verdict: Verdict) -> str:
    """The verdict line: `HUNG in weight-sync NCCL broadcast`, or just the status when not hung."""
    if verdict.status is Status.HUNG:
        line = f"{status_word(verdict)} in {stage_label(verdict.stage)}"
        first = verdict.culprits[0] if verdict.culprits else None
        if first is not None and first.dead:  # what happened first: a process died
            return f"{line}: {culprit_name(first)} died"
        return line
    return status_word(verdict)


def role_label(role: Role) -> str:
    return _ROLE_LABELS.get(role, role.value)


def culprit_name(culprit: Culprit) -> str:
    """`train rank 1`, `SGLang engine`, `driver`, ...; a process of a role of several, with its
    group: `scheduler TP0 of SGLang engine`."""
    name = role_label(culprit.role)
    if culprit.role is Role.TRAIN_RANK and culprit.rank is not None:
        return f"{name} {culprit.rank}"
    if culprit.process:
        return f"{culprit.process} of {name}"
    return name


def culprit_details(culprit: Culprit) -> list[tuple[str, str]]:
    """The known identifying facts of a culprit as (label, value), in reading order."""
    rank_in_name = culprit.role is Role.TRAIN_RANK
    pairs: list[tuple[str, object]] = [
        ("node", culprit.node_ip),
        ("pid", culprit.pid),
        ("rank", None if rank_in_name else culprit.rank),
        ("GPU", culprit.gpu),
        ("engine", culprit.engine_url),
        ("actor", culprit.actor_id),
    ]
    return [(label, str(value)) for label, value in pairs if value is not None]


def seconds(value: float) -> str:
    """`5.0 s`; minutes are spelled out past two minutes (`12 min 5 s`)."""
    if value < 120:
        return f"{value:.1f} s"
    minutes, rest = divmod(round(value), 60)
    return f"{minutes} min {rest} s"


def exit_label(verdict: Verdict) -> str:
    """The exit code with its monitoring-plugin name: `2 (critical)`."""
    code = verdict.exit_code
    return f"{int(code)} ({code.name.lower()})"


def verdict_facts(verdict: Verdict) -> list[tuple[str, str]]:
    """stage, confidence, window, exit as (label, value); no stage / window: left out. Not the
    analysis's own run time (`elapsed_s`, in the JSON): a reader takes it for the hang's age."""
    facts: list[tuple[str, str]] = []
    if verdict.stage is not Stage.NONE:
        facts.append(("stage", verdict.stage.value))
    facts.append(("confidence", verdict.confidence))
    if verdict.window_s > 0:
        facts.append(("window", seconds(verdict.window_s)))
    facts.append(("exit", exit_label(verdict)))
    return facts


def taken_label(at: float) -> str:
    """`2026-12-07 14:09:19 UTC`: when the evidence was taken (UTC, a bundle is read anywhere)."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))


def report_facts(diagnosis: Diagnosis) -> list[tuple[str, str]]:
    """`verdict_facts`, then when the evidence was taken and how long the blocked call had been
    running then (each where the bundle holds it)."""
    facts = verdict_facts(diagnosis.verdict)
    if diagnosis.taken_at is not None:
        facts.append(("taken", taken_label(diagnosis.taken_at)))
    held = diagnosis.blocked_for
    if held is not None:
        facts.append(("blocked for", f"{seconds(held.seconds)}: {held.call}, {held.source}"))
    return facts
