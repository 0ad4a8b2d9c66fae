"""Parse the tail of a log (Ray's log API answer): last line time, notable lines, open slime Timers.

Line shapes (shared/reference/slime.md §7, sglang.md §2):
- slime's `configure_logger`: `[YYYY-mm-dd HH:MM:SS<prefix>] file.py:N - message`; SGLang's own
  logger: `[YYYY-mm-dd HH:MM:SS<tp/dp tags>] message`; Ray's internal logs `[... ,ms I pid tid]`;
  Python's default `YYYY-mm-dd HH:MM:SS,ms ...`.
- Ray prefixes the actor lines it forwards into the driver's log with `(Class pid=N, ip=...)`.
- Ray writes its own marker lines into a worker's log files (`:job_id:02000000`,
  `:actor_name:SGLangEngine`, as the real answers in tests/fixtures/real/local-cpu-ray-2.60-logs):
  they are skipped, not counted as the process's lines.
- slime's Timer (slime/utils/timer.py, slime/observability/timer.py) logs on global rank 0:
  `Timer <name> start` and `Timer <name> end (elapsed: X.Ys)`.
- SGLang's scheduler: `Cache not flushed because there are pending requests. #queue-req: N,
  #running-req: M`.
tqdm redraws with carriage returns, so `\\r` ends a line too. Times carry no zone: they are read
with the collector's UTC offset. Pure: no I/O; never raises but ParseError.
"""

from __future__ import annotations

import calendar
import re
import time
from dataclasses import dataclass
from enum import Enum

from slime_hangdoctor.bundle import ProbeRecord
from slime_hangdoctor.errors import ParseError
from slime_hangdoctor.parsers.json_text import meta_int, meta_str
from slime_hangdoctor.source_spec import SourceSpec

# the source's name (the `source` of its probe records, the folder under raw/): the tail of one log (Ray log API); meta: kind, actor_id / submission_id, suffix
RAY_LOGS = "ray_logs"


# --------------------------------------------------------------------------- facts


class LogKind(str, Enum):
    """What a notable log line says."""

    TRACEBACK = "traceback"  # "Traceback (most recent call last):" with its exception line
    ERROR = "error"  # an ERROR / Exception / FATAL line
    OOM = "oom"  # CUDA or host out of memory, OOM killer
    TIMEOUT = "timeout"  # TimeoutError, "timed out", NCCL watchdog timeouts
    RETRY = "retry"  # slime's HTTP retry lines ("retrying... (attempt k/60, url=...)")
    CACHE_NOT_FLUSHED = "cache_not_flushed"  # SGLang: flush refused while requests are pending
    # SGLang's SubprocessWatchdog (>=0.5.10, utils/watchdog.py `_check_processes`): a child of the
    # HTTP process (a scheduler, the detokenizer) exited non-zero; it SIGQUITs the engine
    CHILD_CRASHED = "child_crashed"


@dataclass(frozen=True)
class LogLine:
    """One notable line of a log tail (text cut to a few hundred characters)."""

    kind: LogKind
    text: str
    time: float | None = None  # epoch seconds, when the line carries a time


@dataclass(frozen=True)
class LogTimer:
    """A slime `Timer <name> start` line with no matching `end` after it in the tail."""

    name: str
    started: float | None
    text: str


@dataclass(frozen=True)
class GroupJoin:
    """SGLang's line for a weight-update group an engine joins (model_runner.py
    `init_weights_update_group`: "init custom process group: master_address=..., master_port=...,
    rank_offset=..., rank=..., world_size=..., group_name=..., backend=..."; shared/reference
    sglang.md): which group, and the engine's place in it."""

    group_name: str
    rank: int
    world_size: int
    text: str


@dataclass(frozen=True)
class LogTail:
    """What one log tail shows."""

    lines: int  # non-empty lines read
    last_time: float | None  # time of the newest line that carries one
    last_line: str  # the newest non-empty line (cut)
    notable: tuple[LogLine, ...] = ()  # oldest first, the last few of each kind
    open_timers: tuple[LogTimer, ...] = ()  # oldest first
    # SGLang's last "Cache not flushed ... #queue-req: N, #running-req: M": (N, M)
    pending_flush: tuple[int, int] | None = None
    group_joins: tuple[GroupJoin, ...] = ()  # oldest first, the last KEEP_PER_KIND


MAX_TEXT = 300  # characters kept of one notable line
KEEP_PER_KIND = 4  # newest notable lines kept per kind
MAX_LINES = 200_000  # a tail with more lines is refused (the collector asks for a few hundred)

# Ray's own marker lines in a worker's log files (ray_constants.LOG_PREFIX_*: the job and actor the
# worker serves, task names), not the process's output.
_RAY_MARKERS = (":job_id:", ":actor_name:", ":task_name:", ":event_summary:", ":info_message:")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_RAY_PREFIX = re.compile(r"^\((?P<who>[^()]{1,200})\)\s?")
_TIME = re.compile(r"(?P<d>\d{4}-\d{2}-\d{2})[ T](?P<t>\d{2}:\d{2}:\d{2})")
_TIMER = re.compile(r"\bTimer (?P<name>[A-Za-z0-9_.\-]+) (?P<what>start|end)\b")
_JOIN = re.compile(
    r"init custom process group: .*?\brank=(?P<rank>\d+), world_size=(?P<ws>\d+), "
    r"group_name=(?P<group>[^,\s]{1,200})"
)
_FLUSH = re.compile(
    r"Cache not flushed because there are pending requests\.?"
    r"(?:.*?#queue-req:\s*(?P<q>\d+))?(?:.*?#running-req:\s*(?P<r>\d+))?"
)
CHILD_CRASHED = re.compile(
    r"Subprocess (?P<name>[\w:.\-]{1,80}) \(pid=(?P<pid>\d+)\) crashed with exit code (?P<code>-?\d+)"
)
_KINDS: tuple[tuple[LogKind, re.Pattern[str]], ...] = (
    (LogKind.CHILD_CRASHED, CHILD_CRASHED),
    (LogKind.CACHE_NOT_FLUSHED, re.compile(r"Cache not flushed because there are pending")),
    (LogKind.RETRY, re.compile(r"retrying\.\.\. \(attempt \d+/\d+")),
    (
        LogKind.OOM,
        re.compile(
            r"out of memory|OutOfMemoryError|\bOOM\b|oom-kill|Killed process|MemoryError",
            re.IGNORECASE,
        ),
    ),
    (
        LogKind.TIMEOUT,
        re.compile(r"TimeoutError|timed out|\bTimeout\b|Watchdog caught collective operation"),
    ),
    (
        LogKind.ERROR,
        re.compile(
            r"\b(ERROR|FATAL|CRITICAL)\b|^\s*\w*(Error|Exception)\b|\bError:"
            # glog severity E / F, as torch's c10d prints it: `[rank1]:[E1129 22:06:18.46 ...]`
            r"|(?:^|\]:)\[[EF]\d{4} \d{2}:\d{2}:\d{2}"
        ),
    ),
)


def parse_log_tail(text: str, utc_offset_s: int = 0) -> LogTail:
    """What the tail `text` shows. `utc_offset_s`: the offset of the logs' local time."""
    if not isinstance(text, str):
        raise ParseError("a log tail is text")
    raw = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if len(raw) > MAX_LINES:
        raise ParseError(f"log tail has {len(raw)} lines (more than {MAX_LINES})")
    notable: list[LogLine] = []
    joins: list[GroupJoin] = []
    timers: dict[tuple[str, str], LogTimer] = {}
    pending: tuple[int, int] | None = None
    last_time: float | None = None
    last_line = ""
    count = 0
    in_traceback = False
    for line in raw:
        stripped = _ANSI.sub("", line).strip()
        if not stripped or stripped.startswith(_RAY_MARKERS):
            continue
        count += 1
        who, body = _split_prefix(stripped)
        when = _time_of(body, utc_offset_s)
        if when is not None:
            last_time = when
        last_line = _cut(stripped)
        if body.startswith("Traceback (most recent call last)"):
            in_traceback = True
            continue
        if in_traceback:
            # Frames are indented; the exception line is the first one that is not.
            if (
                line[:1].isspace()
                or body.startswith(("File ", "^", "~"))
                or who
                and body[:1] == " "
            ):
                continue
            in_traceback = False
            notable.append(LogLine(LogKind.TRACEBACK, _cut(stripped), when))
            continue
        timer = _TIMER.search(body)
        if timer is not None:
            key = (who, timer["name"])
            if timer["what"] == "start":
                timers[key] = LogTimer(timer["name"], when, _cut(stripped))
            else:
                timers.pop(key, None)
            continue
        join = _JOIN.search(body)
        if join is not None:
            joins.append(
                GroupJoin(join["group"], int(join["rank"]), int(join["ws"]), _cut(stripped))
            )
            continue
        kind = _kind(body)
        if kind is None:
            continue
        notable.append(LogLine(kind, _cut(stripped), when))
        if kind is LogKind.CACHE_NOT_FLUSHED:
            m = _FLUSH.search(body)
            if m is not None and m["q"] is not None and m["r"] is not None:
                pending = (int(m["q"]), int(m["r"]))
    return LogTail(
        lines=count,
        last_time=last_time,
        last_line=last_line,
        notable=_newest_per_kind(notable),
        open_timers=tuple(sorted(timers.values(), key=lambda t: t.started or 0.0)),
        pending_flush=pending,
        group_joins=tuple(joins[-KEEP_PER_KIND:]),
    )


def _split_prefix(line: str) -> tuple[str, str]:
    """(`Class pid=N, ip=...` or "", the rest) of a line Ray forwarded into a driver log."""
    m = _RAY_PREFIX.match(line)
    if m is None or "pid=" not in m["who"]:
        return "", line
    return m["who"], line[m.end() :]


def _time_of(body: str, utc_offset_s: int) -> float | None:
    m = _TIME.search(body[:48])
    if m is None:
        return None
    try:
        parsed = time.strptime(f"{m['d']} {m['t']}", "%Y-%m-%d %H:%M:%S")
    except ValueError:
        return None
    return float(calendar.timegm(parsed) - utc_offset_s)


def _kind(body: str) -> LogKind | None:
    for kind, pattern in _KINDS:
        if pattern.search(body):
            return kind
    return None


def _newest_per_kind(lines: list[LogLine]) -> tuple[LogLine, ...]:
    keep: list[LogLine] = []
    seen: dict[LogKind, int] = {}
    for line in reversed(lines):
        if seen.get(line.kind, 0) < KEEP_PER_KIND:
            seen[line.kind] = seen.get(line.kind, 0) + 1
            keep.append(line)
    return tuple(reversed(keep))


def _cut(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 3] + "..."


class LogOwner(str, Enum):
    """Whose log a tail is: the job's driver's, or one slime actor's stream."""

    DRIVER = "driver"
    ACTOR = "actor"


@dataclass(frozen=True)
class LogObs:
    """The tail of one log: a job's driver log or one stream (err / out) of an actor."""

    kind: LogOwner
    tail: LogTail
    node_ip: str | None = None
    actor_id: str | None = None
    class_name: str | None = None
    pid: int | None = None
    submission_id: str | None = None
    suffix: str | None = None  # err | out (actors)
    fetched_at: float = 0.0
    truncated: bool = False

    @property
    def label(self) -> str:
        if self.kind is LogOwner.DRIVER:
            return f"driver log ({self.submission_id})"
        return f"{self.class_name} log (pid {self.pid}, {self.suffix})"


def parse_record(data: bytes, rec: ProbeRecord) -> LogObs:
    """One tail, with what the record's meta says of it (whose log, which stream, whether cut)."""
    meta = rec.meta
    offset = meta_int(meta.get("utc_offset_s")) or 0
    return LogObs(
        kind=LogOwner.DRIVER if meta.get("kind") == LogOwner.DRIVER.value else LogOwner.ACTOR,
        tail=parse_log_tail(data.decode("utf-8", "replace"), offset),
        node_ip=rec.node_ip,
        actor_id=meta_str(meta.get("actor_id")),
        class_name=meta_str(meta.get("class_name")),
        pid=meta_int(meta.get("pid")),
        submission_id=meta_str(meta.get("submission_id")),
        suffix=meta_str(meta.get("suffix")),
        fetched_at=rec.started_at,
        truncated=bool(meta.get("truncated")),
    )


# The tail of one log through Ray's log API (collect/logs.py: 256 KiB a tail).
SPEC = SourceSpec[LogObs](
    name=RAY_LOGS,
    parse=parse_record,
    max_bytes=4 * 1024 * 1024,
    window_probe="slime_hangdoctor.collect.logs",
    switch="logs",
    analysis="slime_hangdoctor.analysis.parts.logs",
)
