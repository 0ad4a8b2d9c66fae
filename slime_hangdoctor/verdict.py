"""The verdict contract (`slime-hangdoctor.verdict/1`) and the exit codes that go with it."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, Literal, get_args

SCHEMA = "slime-hangdoctor.verdict/1"
# its JSON Schema (draft 2020-12), shipped in the package: importlib.resources.files(
# "slime_hangdoctor") / SCHEMA_FILE
SCHEMA_FILE = "schemas/verdict-1.schema.json"

Confidence = Literal["high", "medium", "low"]


class Status(str, Enum):
    HUNG = "hung"
    PROGRESSING = "progressing"
    IDLE = "idle"
    UNKNOWN = "unknown"


class Stage(str, Enum):
    """The blocked stage ("none" when not hung). Rows of slime.md §8 map onto these."""

    STARTUP = "startup"
    ROLLOUT_DISPATCH = "rollout_dispatch"
    REWARD = "reward"
    OFFLOAD_ONLOAD = "offload_onload"
    TRAIN = "train"
    WEIGHT_SYNC = "weight_sync"
    NCCL_BROADCAST = "nccl_broadcast"
    EVAL = "eval"
    CHECKPOINT = "checkpoint"  # save / load of checkpoints (added compatibly to verdict/1)
    NONE = "none"
    UNKNOWN = "unknown"

    @property
    def label(self) -> str:
        """The stage in words for prose (`rollout generation`): summaries, headlines, reports."""
        return STAGE_LABELS.get(self, self.value)


# The one table of stage words: the analysis's summary and every report's headline use it.
STAGE_LABELS: dict[Stage, str] = {
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


class Role(str, Enum):
    SGLANG_ENGINE = "sglang_engine"
    TRAIN_RANK = "train_rank"
    ROLLOUT_MANAGER = "rollout_manager"
    DRIVER = "driver"
    ROUTER = "router"


class Severity(str, Enum):
    CRITICAL = "critical"
    WARNING = "warning"
    INFO = "info"


class ExitCode(int, Enum):
    """Monitoring-plugin convention."""

    OK = 0
    WARNING = 1
    CRITICAL = 2
    UNKNOWN = 3


@dataclass(frozen=True)
class Culprit:
    role: Role
    why: str
    node_ip: str | None = None
    pid: int | None = None
    rank: int | None = None
    engine_url: str | None = None
    actor_id: str | None = None
    gpu: int | None = None  # NVML index, where known (extra field, not in the minimal contract)
    # which process of its role `pid` is, for a role of several processes (an engine's
    # `scheduler`, `scheduler TP1`, `HTTP server`, `detokenizer`, `SGLangEngine actor`)
    process: str | None = None
    # the rule that gave each reason of `why` (its " | "-separated parts, in order):
    # `parts/<name>:<function>` (docs/verdict.md, "Provenance")
    by: tuple[str, ...] = ()
    # the process has died (gone from its node's process table, a zombie, or its actor DEAD in
    # Ray): the report says so first and never advises a dump of it (analysis/advice.py is_dead)
    dead: bool = False


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: Severity
    message: str
    evidence: tuple[str, ...] = ()  # short excerpts: frames, readings, HTTP answers
    by: str | None = (
        None  # the rule that made it: `parts/<name>:<function>`, `diagnosis:<function>`
    )

    def __post_init__(self) -> None:
        # one line once: two sources may read the same answer (`GET .../metrics: 200`)
        object.__setattr__(self, "evidence", tuple(dict.fromkeys(self.evidence)))


# `COMMAND (on HOST)  (WHY)`: the line a report prints for a step (NextStep.text)
_ON_HOST = re.compile(r"^(?P<command>.*?) \(on (?P<host>[^()\s]+)\)$")
_LEAD_HOST = re.compile(r"^on (?P<host>[^()\s]+)(\s+|$)")
_PID = re.compile(r"(?:--pid |/proc/)(?P<pid>\d+)\b")


@dataclass(frozen=True)
class NextStep:
    """One thing to do next. `command`: a line to paste into a shell, where the step is one (None
    for advice in words); `host`: the node to run it on, where it matters; `process`: the pid it
    is about; `why`: what it shows or why to do it (the whole step, for advice in words); `by`:
    the rule that gave it (docs/verdict.md, "Provenance")."""

    why: str = ""
    command: str | None = None
    host: str | None = None
    process: int | None = None
    by: str | None = None

    @property
    def text(self) -> str:
        """The line the text, Markdown and HTML reports print: `COMMAND (on HOST)  (WHY)`."""
        if self.command is None:
            return self.why
        line = self.command + (f" (on {self.host})" if self.host else "")
        return f"{line}  ({self.why})" if self.why else line

    @property
    def key(self) -> str:
        """What makes two steps one: the same command (or, for advice in words, the same words)."""
        return self.command if self.command is not None else self.why

    @classmethod
    def parse(cls, line: str, by: str | None = None) -> NextStep:
        """A step from the line of its text form: `COMMAND (on HOST)  (WHY)`, `COMMAND  WHY`, a
        bare command (it starts in lower case, as `py-spy`, `curl`, `ray`, `for` do), or advice in
        words (anything else: it is all `why`). The inverse of `text` for the steps it makes."""
        line = line.strip()
        if not line[:1].islower():
            return cls(why=line, by=by)
        command, _, rest = line.partition("  ")
        command, rest, host = command.strip(), rest.strip(), None
        if m := _ON_HOST.match(command):
            command, host = m["command"], m["host"]
        elif m := _LEAD_HOST.match(rest):
            host, rest = m["host"], rest[m.end() :].strip()
        if rest.startswith("(") and rest.endswith(")") and _balanced(rest[1:-1]):
            rest = rest[1:-1]
        pid = _PID.search(command)
        return cls(
            why=rest, command=command, host=host, process=int(pid["pid"]) if pid else None, by=by
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "command": self.command,
            "host": self.host,
            "process": self.process,
            "why": self.why,
            "by": self.by,
            "text": self.text,
        }


def _balanced(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth < 0:
            return False
    return depth == 0


@dataclass(frozen=True)
class JobRef:
    """The Ray job a verdict is about: its submission id (`ray job submit`) and job id."""

    submission_id: str | None = None
    job_id: str | None = None


@dataclass(frozen=True)
class Verdict:
    status: Status
    stage: Stage
    summary: str
    culprits: tuple[Culprit, ...] = ()
    findings: tuple[Finding, ...] = ()
    next_steps: tuple[NextStep, ...] = ()
    blind_spots: tuple[str, ...] = ()
    window_s: float = 0.0
    elapsed_s: float = 0.0
    confidence: Confidence = "low"
    suspected: bool = False  # hung-looking but not yet past a stall threshold (exit 1)
    extra: dict[str, Any] = field(default_factory=dict)
    collected_at: float | None = None  # when the evidence was taken (epoch s: the bundle's start)
    tool_version: str | None = None  # the slime-hangdoctor that made this verdict
    job: JobRef | None = None  # the Ray job it is about, where one runs
    bundle: str | None = None  # the bundle it was read from or written to, where one was

    @property
    def step_texts(self) -> tuple[str, ...]:
        """Each next step as the line a report prints (`NextStep.text`)."""
        return tuple(s.text for s in self.next_steps)

    @property
    def exit_code(self) -> ExitCode:
        if self.status is Status.UNKNOWN:
            return ExitCode.UNKNOWN
        if self.status is Status.HUNG:
            return ExitCode.WARNING if self.suspected else ExitCode.CRITICAL
        return ExitCode.OK

    def to_json(self) -> dict[str, Any]:
        """The stable machine-readable form printed by `--format json`."""
        return {
            "schema": SCHEMA,
            "status": self.status.value,
            "stage": self.stage.value,
            "summary": self.summary,
            "culprits": [_culprit_json(c) for c in self.culprits],
            "findings": [
                {
                    "rule": f.rule,
                    "severity": f.severity.value,
                    "message": f.message,
                    "evidence": list(f.evidence),
                    "by": f.by,
                }
                for f in self.findings
            ],
            "next_steps": [s.to_json() for s in self.next_steps],
            "blind_spots": list(self.blind_spots),
            "window_s": round(self.window_s, 3),
            "elapsed_s": round(self.elapsed_s, 3),
            "confidence": self.confidence,
            "exit_code": int(self.exit_code),
            "collected_at": _iso(self.collected_at),
            "tool_version": self.tool_version,
            "job": None if self.job is None else asdict(self.job),
            "bundle": self.bundle,
            **({"extra": self.extra} if self.extra else {}),
        }


def _iso(epoch: float | None) -> str | None:
    """ISO 8601 in UTC (`2026-12-07T14:09:19Z`): when the evidence was taken."""
    if epoch is None or epoch <= 0:
        return None
    from datetime import datetime, timezone

    return (
        datetime.fromtimestamp(epoch, timezone.utc)
        .isoformat(timespec="seconds")
        .replace("+00:00", "Z")
    )


def _from_iso(v: Any) -> float | None:
    if v is None:
        return None
    from datetime import datetime

    return datetime.fromisoformat(_str(v).replace("Z", "+00:00")).timestamp()


def verdict_from_json(doc: Any) -> Verdict:
    """The inverse of `Verdict.to_json` (the watchdog keeps a stall's verdict in its state file).

    Raises ValueError on anything that is not such a document."""
    try:
        if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
            raise ValueError("not a slime-hangdoctor verdict")
        return Verdict(
            status=Status(doc["status"]),
            stage=Stage(doc["stage"]),
            summary=_str(doc["summary"]),
            culprits=tuple(_culprit_from(c) for c in _list(doc.get("culprits"))),
            findings=tuple(
                Finding(
                    _str(f["rule"]),
                    Severity(f["severity"]),
                    _str(f["message"]),
                    tuple(_str(e) for e in _list(f.get("evidence"))),
                    by=_opt_str(f.get("by")),
                )
                for f in _list(doc.get("findings"))
            ),
            next_steps=tuple(_step_from(x) for x in _list(doc.get("next_steps"))),
            blind_spots=tuple(_str(x) for x in _list(doc.get("blind_spots"))),
            window_s=float(doc.get("window_s") or 0.0),
            elapsed_s=float(doc.get("elapsed_s") or 0.0),
            confidence=_confidence(doc.get("confidence") or "low"),
            suspected=doc["status"] == Status.HUNG.value and doc.get("exit_code") == 1,
            extra=dict(doc["extra"]) if isinstance(doc.get("extra"), dict) else {},
            collected_at=_from_iso(doc.get("collected_at")),
            tool_version=_opt_str(doc.get("tool_version")),
            job=_job_from(doc.get("job")),
            bundle=_opt_str(doc.get("bundle")),
        )
    except (KeyError, TypeError, AttributeError, OverflowError) as exc:
        raise ValueError(f"not a slime-hangdoctor verdict: {type(exc).__name__}: {exc}") from exc


def _step_from(d: Any) -> NextStep:
    """A next step as verdict/1 writes it now (an object), or as it did before (its line: the
    watchdog's state file keeps verdicts of earlier versions)."""
    if isinstance(d, str):
        return NextStep.parse(d)
    if not isinstance(d, dict):
        raise TypeError("a next step is neither a string nor an object")
    pid = d.get("process")
    if pid is not None and (isinstance(pid, bool) or not isinstance(pid, int)):
        raise TypeError("a next step's process is not a pid")
    return NextStep(
        why=_str(d.get("why") or ""),
        command=_opt_str(d.get("command")),
        host=_opt_str(d.get("host")),
        process=pid,
        by=_opt_str(d.get("by")),
    )


def _job_from(d: Any) -> JobRef | None:
    if d is None:
        return None
    if not isinstance(d, dict):
        raise TypeError("job is not an object")
    return JobRef(_opt_str(d.get("submission_id")), _opt_str(d.get("job_id")))


def _opt_str(v: Any) -> str | None:
    return None if v is None else _str(v)


def _culprit_from(d: Any) -> Culprit:
    if not isinstance(d, dict):
        raise TypeError("a culprit is not an object")

    def opt_int(key: str) -> int | None:
        v = d.get(key)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"culprit {key} is not an integer")
        return v

    def opt_str(key: str) -> str | None:
        v = d.get(key)
        return None if v is None else _str(v)

    return Culprit(
        role=Role(d["role"]),
        why=_str(d["why"]),
        node_ip=opt_str("node_ip"),
        pid=opt_int("pid"),
        rank=opt_int("rank"),
        engine_url=opt_str("engine_url"),
        actor_id=opt_str("actor_id"),
        gpu=opt_int("gpu"),
        process=opt_str("process"),
        by=tuple(_str(x) for x in _list(d.get("by"))),
        dead=_bool(d.get("dead", False)),
    )


def _confidence(v: Any) -> Confidence:
    for level in get_args(Confidence):
        if v == level:
            return level  # type: ignore[no-any-return]
    raise TypeError(f"confidence {v!r} is not one of {', '.join(get_args(Confidence))}")


def _bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise TypeError(f"expected true or false, got {type(v).__name__}")
    return v


def _str(v: Any) -> str:
    if not isinstance(v, str):
        raise TypeError(f"expected a string, got {type(v).__name__}")
    return v


def _list(v: Any) -> list[Any]:
    if v is None:
        return []
    if not isinstance(v, list):
        raise TypeError(f"expected a list, got {type(v).__name__}")
    return v


def _culprit_json(c: Culprit) -> dict[str, Any]:
    d = asdict(c)
    d["role"] = c.role.value
    d["by"] = list(c.by)
    return d


def unknown_verdict(
    summary: str,
    *,
    blind_spots: tuple[str, ...] = (),
    next_steps: tuple[str, ...] = (),
    elapsed_s: float = 0.0,
    by: str | None = None,
) -> Verdict:
    """The verdict for "could not diagnose" (exit 3); `next_steps`: what the user can do about it
    (an unreachable Ray: how to give the address)."""
    return Verdict(
        status=Status.UNKNOWN,
        stage=Stage.UNKNOWN,
        summary=summary,
        next_steps=tuple(NextStep.parse(s, by=by) for s in next_steps),
        blind_spots=blind_spots,
        elapsed_s=elapsed_s,
    )


class ReportFormat(str, Enum):
    """The forms a Diagnosis is delivered in (`--format`; slime_hangdoctor.render writes them)."""

    TEXT = "text"
    JSON = "json"
    MARKDOWN = "markdown"
    HTML = "html"


@dataclass(frozen=True)
class RoleRow:
    """One row of the report's process table: a slime process and what it is doing."""

    role: Role
    label: str  # "train rank 1", "engine http://10.0.0.1:15000", "driver"
    node_ip: str | None
    pid: int | None
    stage: Stage
    state: str  # "blocked in dist.broadcast", "idle", "spinning at a CUDA sync", "dead", ...
    culprit: bool = False
    engine_url: str | None = None  # the engine a process is part of (actor, server, schedulers)


@dataclass(frozen=True)
class StackExcerpt:
    """The culprit's (or the most telling) stack, innermost first, with the deciding frames marked."""

    title: str
    frames: tuple[str, ...]
    highlight: tuple[int, ...] = ()  # indexes into frames


class WaitKind(str, Enum):
    """What one wait of the wait-for graph is."""

    RAY_CALL = "ray_call"  # a Ray actor method waits on the call it made to another actor
    QUEUE = "queue"  # a Ray call waits in an actor's queue behind the method it runs now
    HTTP_REQUEST = "http_request"  # an HTTP request held by the server it was sent to
    COLLECTIVE = "collective"  # a rank waits in a collective for a peer that never joins it
    CHILD = "child"  # a process waits for a child it forked (joined, or its pipe)


@dataclass(frozen=True)
class WaitParty:
    """One end of a wait: a process of the job where one is known (`pid`), else a server (`url`)."""

    label: str  # "train rank 0", "engine server http://10.0.0.1:15000", "router http://..."
    role: Role | None = None
    node_ip: str | None = None
    pid: int | None = None
    url: str | None = None  # the engine (or other server) it is part of, where known
    actor_id: str | None = None


@dataclass(frozen=True)
class Wait:
    """`waiter` cannot go on until `waited_for` does something; `evidence` says what showed it,
    each line prefixed with its source (`[ray_tasks] ...`, `[stacks] ...`)."""

    waiter: WaitParty
    waited_for: WaitParty
    kind: WaitKind
    evidence: tuple[str, ...] = ()


@dataclass(frozen=True)
class ProbeSpan:
    """The probes of one source at one sample: when they ran (seconds after the run began) and
    how they ended."""

    source: str
    sample: int | None  # 0 / 1, None for one-off probes
    start_s: float
    end_s: float
    outcomes: tuple[tuple[str, int], ...]  # (outcome, how many probes ended so)


@dataclass(frozen=True)
class CounterMove:
    """One work counter read at the first and the last sample."""

    name: str  # "engine http://10.0.0.1:15000 decode tokens"
    before: float
    after: float


@dataclass(frozen=True)
class Timeline:
    """The run's two samples for the report: when each sample began, what each source's probes
    did, and which work counters moved."""

    sample_times: tuple[float, ...]  # seconds after the run began
    spans: tuple[ProbeSpan, ...] = ()
    counters: tuple[CounterMove, ...] = ()


@dataclass(frozen=True)
class BlockedFor:
    """How long the blocked call had been running when the evidence was taken, and what says so."""

    seconds: float
    call: str  # "MegatronTrainRayActor.update_weights (pid 2175)"
    source: str  # "the culprit's call, from its Ray task start"


@dataclass(frozen=True)
class Diagnosis:
    """What renderers get: the verdict plus the per-process table, a stack excerpt and the waits
    the analysis found (the wait-for graph's edges); when the evidence was taken (`taken_at`,
    seconds since the epoch: the first sample), how long the blocked call had run then, and which
    of the verdict's blind spots could change it."""

    verdict: Verdict
    rows: tuple[RoleRow, ...] = ()
    excerpt: StackExcerpt | None = None
    waits: tuple[Wait, ...] = ()
    timeline: Timeline | None = None
    taken_at: float | None = None
    blocked_for: BlockedFor | None = None
    doubts: tuple[str, ...] = ()  # the blind spots that could change the verdict (`--brief`)
