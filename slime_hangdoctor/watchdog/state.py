"""The watchdog's state file (last progress markers and times) and its run lock."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import math
import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

from slime_hangdoctor.watchdog.private_files import (
    UnsafePath,
    open_private,
    private_dir,
    read_private,
    write_atomic,
)

STATE_SCHEMA = "slime-hangdoctor.watchdog-state/1"
# The CLI's default --state-file (a shared directory: see watchdog/run.py run_check for what
# happens when someone else created it first).
DEFAULT_STATE_FILE = Path("/var/tmp/slime-hangdoctor/state.json")


@dataclass(frozen=True)
class StallLook:
    """The last full look (stacks and all) at the stall in progress: what a later run may carry
    forward while nothing moves (watchdog/look.py)."""

    at: float  # epoch seconds of that run
    verdict: dict[str, Any]  # its Verdict.to_json()
    members: tuple[str, ...]  # its slime processes, "node_ip:pid", sorted


@dataclass(frozen=True)
class CounterPlan:
    """What the next runs' counters-only look reads (watchdog/counter_look.py), from the last look
    that ran the analysis and judged the job progressing on its engines' work counters."""

    at: float  # epoch seconds of that look
    target: str  # the address that run was given ("" for none): another job's state never applies
    engines: tuple[str, ...]  # base URLs of the engines whose work counters rose in its window
    processes: tuple[tuple[int, float], ...]  # (pid, start time) of this node's slime processes
    # (pid, start time) of this node's processes on the rollout's request path (the router, miles's
    # session server, the engines' HTTP processes): the counters look reads their CPU times
    hops: tuple[tuple[int, float], ...] = ()


# Bounds on what a state file may name: it is read back by a root cron run.
MAX_PLAN_ENGINES = 256
MAX_PLAN_PROCESSES = 4096


@dataclass(frozen=True)
class WatchState:
    last_progress_at: float | None = None  # epoch seconds of the last run that saw progress
    last_run_at: float | None = None
    markers: dict[str, str] = field(default_factory=dict)
    alerted_stall_since: float | None = (
        None  # the stall we already alerted for (one alert per stall)
    )
    runs: int = 0
    # The last run saw something that moves only with work move within its own window: the next
    # run first looks without stacks (most runs of a progressing job need none).
    window_moved: bool = False
    stall_look: StallLook | None = None
    # Kept only while the job progresses on its engines' counters (watchdog/counter_look.py).
    counter_plan: CounterPlan | None = None
    # The bundle of the stall in progress (its page names it on every run of that stall).
    stall_bundle: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"schema": STATE_SCHEMA, **asdict(self)}


@dataclass(frozen=True)
class LoadedState:
    state: WatchState
    problem: str | None = (
        None  # why the file was ignored (corrupt, foreign) - reported, then replaced
    )


def load_state(path: Path) -> LoadedState:
    """Read the state file; a missing file is a first run, a bad one is reported and replaced."""
    try:
        raw = read_private(path).decode("utf-8")
    except FileNotFoundError:
        return LoadedState(WatchState())
    except (OSError, UnicodeDecodeError) as exc:
        return LoadedState(WatchState(), f"state file {path} unreadable ({exc}); starting afresh")
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        return LoadedState(WatchState(), f"state file {path} is corrupt ({exc.msg}); replaced")
    if not isinstance(data, dict) or data.get("schema") != STATE_SCHEMA:
        return LoadedState(
            WatchState(), f"state file {path} is not a slime-hangdoctor state file; replaced"
        )
    try:
        markers = data.get("markers") or {}
        if not isinstance(markers, dict):
            raise TypeError("markers is not an object")
        return LoadedState(
            WatchState(
                last_progress_at=_opt_float(data.get("last_progress_at")),
                last_run_at=_opt_float(data.get("last_run_at")),
                markers={str(k): str(v) for k, v in markers.items()},
                alerted_stall_since=_opt_float(data.get("alerted_stall_since")),
                runs=int(data.get("runs") or 0),
                window_moved=data.get("window_moved") is True,
                stall_look=_stall_look(data.get("stall_look")),
                counter_plan=_counter_plan(data.get("counter_plan")),
                stall_bundle=_opt_str(data.get("stall_bundle")),
            )
        )
    except (TypeError, ValueError) as exc:
        return LoadedState(WatchState(), f"state file {path} has bad fields ({exc}); replaced")


def save_state(path: Path, state: WatchState) -> None:
    """Atomic write (temp file in the same private directory + rename), 0600, never through a
    symlink (private_files.py: safe for a root cron run)."""
    private_dir(path.parent)
    write_atomic(path, json.dumps(state.to_json(), indent=1).encode("utf-8"))


class LockHeld(Exception):
    """Another check holds the lock."""


@contextlib.contextmanager
def run_lock(state_path: Path) -> Iterator[None]:
    """Non-blocking exclusive lock beside the state file, so overlapping cron runs never pile up.
    The directory must be ours and private, the lock is never opened through a symlink
    (UnsafePath / OSError otherwise: a planted link cannot make a root run truncate a file)."""
    lock_path = state_path.with_name(state_path.name + ".lock")
    private_dir(lock_path.parent)
    try:
        fd = open_private(lock_path, os.O_RDWR | os.O_CREAT)
    except OSError as exc:
        raise UnsafePath(f"cannot open the lock {lock_path}: {exc.strerror}") from exc
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise LockHeld(str(lock_path)) from exc
            raise
        try:  # who holds it, for a person who looks: the lock itself is the flock
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()} {time.time():.0f}\n".encode())
        except OSError:
            pass  # a full disk (ENOSPC) must not stop the run: its state write says so
        yield
    finally:
        os.close(fd)


def _stall_look(v: Any) -> StallLook | None:
    """A remembered stall look, or None when absent or not well-formed (the next run then takes a
    full look: the safe side, so not reported as a problem)."""
    if not isinstance(v, dict):
        return None
    at, verdict, members = v.get("at"), v.get("verdict"), v.get("members")
    if (
        not isinstance(at, (int, float))
        or isinstance(at, bool)
        or not isinstance(verdict, dict)
        or not isinstance(members, list)
        or not all(isinstance(m, str) for m in members)
    ):
        return None
    return StallLook(float(at), verdict, tuple(members))


def _counter_plan(v: Any) -> CounterPlan | None:
    """A remembered counters-only plan, or None when absent or not well-formed (the next run then
    takes the analysed look: the safe side, so not reported as a problem)."""
    if not isinstance(v, dict):
        return None
    at, target, engines, processes = (
        v.get("at"),
        v.get("target"),
        v.get("engines"),
        v.get("processes"),
    )
    if not _number(at) or not isinstance(target, str):
        return None
    if not isinstance(engines, list) or not 0 < len(engines) <= MAX_PLAN_ENGINES:
        return None
    if not all(isinstance(u, str) and u.startswith(("http://", "https://")) for u in engines):
        return None
    pairs, hops = _pid_starts(processes), _pid_starts(v.get("hops", []))
    if pairs is None or hops is None:
        return None
    return CounterPlan(float(at), target, tuple(engines), pairs, hops)


def _pid_starts(v: Any) -> tuple[tuple[int, float], ...] | None:
    """A list of [pid, start time] pairs, or None when not well-formed."""
    if not isinstance(v, list) or len(v) > MAX_PLAN_PROCESSES:
        return None
    pairs: list[tuple[int, float]] = []
    for p in v:
        if not (isinstance(p, list) and len(p) == 2 and isinstance(p[0], int) and _number(p[1])):
            return None
        if isinstance(p[0], bool) or p[0] <= 0:
            return None
        pairs.append((p[0], float(p[1])))
    return tuple(pairs)


def _number(v: Any) -> TypeGuard[int | float]:
    """A finite JSON number (not a bool)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _opt_float(v: Any) -> float | None:
    return None if v is None else float(v)


def _opt_str(v: Any) -> str | None:
    return v if isinstance(v, str) and v else None
