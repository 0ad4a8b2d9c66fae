"""Words shared by the text and markdown reports: status, stage, role and culprit labels."""

from __future__ import annotations

from slime_hangdoctor.verdict import Culprit, Role, Stage, Status, Verdict

__all__ = [
    "culprit_details",
    "culprit_name",
    "exit_label",
    "headline",
    "role_label",
    "seconds",
    "stage_label",
    "status_word",
    "verdict_facts",
]

_STAGE_LABELS: dict[Stage, str] = {
    Stage.STARTUP: "engine startup",
    Stage.ROLLOUT_DISPATCH: "rollout generation",
    Stage.REWARD: "reward",
    Stage.OFFLOAD_ONLOAD: "offload / onload",
    Stage.TRAIN: "train step",
    Stage.WEIGHT_SYNC: "weight sync",
    Stage.NCCL_BROADCAST: "weight-sync NCCL broadcast",
    Stage.EVAL: "eval",
    Stage.CHECKPOINT: "checkpoint save / load",
    Stage.NONE: "none",
    Stage.UNKNOWN: "an unknown stage",
}

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
    return _STAGE_LABELS.get(stage, stage.value)


def headline(verdict: Verdict) -> str:
    """The verdict line: `HUNG in weight-sync NCCL broadcast`, or just the status when not hung."""
    if verdict.status is Status.HUNG:
        return f"{status_word(verdict)} in {stage_label(verdict.stage)}"
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
    """stage, confidence, window, elapsed, exit as (label, value); no stage / window: left out."""
    facts: list[tuple[str, str]] = []
    if verdict.stage is not Stage.NONE:
        facts.append(("stage", verdict.stage.value))
    facts.append(("confidence", verdict.confidence))
    if verdict.window_s > 0:
        facts.append(("window", seconds(verdict.window_s)))
    facts.append(("elapsed", seconds(verdict.elapsed_s)))
    facts.append(("exit", exit_label(verdict)))
    return facts
