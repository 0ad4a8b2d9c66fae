"""The verdict contract (`slime-hangdoctor.verdict/1`) and the exit codes that go with it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, Literal, get_args

SCHEMA = "slime-hangdoctor.verdict/1"

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


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: Severity
    message: str
    evidence: tuple[str, ...] = ()  # short excerpts: frames, readings, HTTP answers


@dataclass(frozen=True)
class Verdict:
    status: Status
    stage: Stage
    summary: str
    culprits: tuple[Culprit, ...] = ()
    findings: tuple[Finding, ...] = ()
    next_steps: tuple[str, ...] = ()
    blind_spots: tuple[str, ...] = ()
    window_s: float = 0.0
    elapsed_s: float = 0.0
    confidence: Confidence = "low"
    suspected: bool = False  # hung-looking but not yet past a stall threshold (exit 1)
    extra: dict[str, Any] = field(default_factory=dict)

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
                }
                for f in self.findings
            ],
            "next_steps": list(self.next_steps),
            "blind_spots": list(self.blind_spots),
            "window_s": round(self.window_s, 3),
            "elapsed_s": round(self.elapsed_s, 3),
            "confidence": self.confidence,
            "exit_code": int(self.exit_code),
            **({"extra": self.extra} if self.extra else {}),
        }


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
                )
                for f in _list(doc.get("findings"))
            ),
            next_steps=tuple(_str(x) for x in _list(doc.get("next_steps"))),
            blind_spots=tuple(_str(x) for x in _list(doc.get("blind_spots"))),
            window_s=float(doc.get("window_s") or 0.0),
            elapsed_s=float(doc.get("elapsed_s") or 0.0),
            confidence=_confidence(doc.get("confidence") or "low"),
            suspected=doc["status"] == Status.HUNG.value and doc.get("exit_code") == 1,
            extra=dict(doc["extra"]) if isinstance(doc.get("extra"), dict) else {},
        )
    except (KeyError, TypeError, AttributeError, OverflowError) as exc:
        raise ValueError(f"not a slime-hangdoctor verdict: {type(exc).__name__}: {exc}") from exc


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
    )


def _confidence(v: Any) -> Confidence:
    for level in get_args(Confidence):
        if v == level:
            return level  # type: ignore[no-any-return]
    raise TypeError(f"confidence {v!r} is not one of {', '.join(get_args(Confidence))}")


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
    return d


def unknown_verdict(
    summary: str,
    *,
    blind_spots: tuple[str, ...] = (),
    next_steps: tuple[str, ...] = (),
    elapsed_s: float = 0.0,
) -> Verdict:
    """The verdict for "could not diagnose" (exit 3); `next_steps`: what the user can do about it
    (an unreachable Ray: how to give the address)."""
    return Verdict(
        status=Status.UNKNOWN,
        stage=Stage.UNKNOWN,
        summary=summary,
        next_steps=next_steps,
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
