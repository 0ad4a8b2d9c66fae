"""Stacks and processes that real processes produced, for the unit tests of stack rules (issue 21:
"unit tests of stack rules use stacks that a real process produced").

Every shape is read by the product's own loader (`load.load_snapshot`) from a recorded bundle
whose provenance row is in tests/fixtures/README.md, and selected by the pid it had there. A test
that composes a scenario from several recordings moves each process to the test's pid, sample or
node with the named transformations `transforms.stack_relabelled` / `process_relabelled`; no
frame, title or thread is written here.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

from slime_hangdoctor.bundle import open_bundle
from slime_hangdoctor.load import load_snapshot
from slime_hangdoctor.parsers.log_heads import SPEC as LOG_HEADS
from slime_hangdoctor.parsers.log_heads import ActorLogHead
from slime_hangdoctor.parsers.processes import SPEC as PROCESSES
from slime_hangdoctor.parsers.processes import ProcessInfo
from slime_hangdoctor.parsers.pyspy import ALL_STACKS, StackObs, ThreadStack
from slime_hangdoctor.snapshot import Snapshot
from slime_hangdoctor.source_spec import Observed
from tests.fixtures import transforms as tf
from tests.unit.analysis_builders import NODE

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def bundle(name: str) -> Path:
    """A recorded demo bundle by its folder and fault: `demo/reward_hang`, `demo2/none`..."""
    return FIXTURES / "analysis" / f"{name}.tar.gz"


@functools.lru_cache(maxsize=32)
def recorded(path: Path) -> Snapshot:
    """The whole recorded snapshot of `path`, as the loader reads it."""
    with open_bundle(path) as opened:
        return load_snapshot(opened)


def recorded_stack(path: Path, pid: int, sample: int = 0) -> StackObs:
    """The py-spy observation of `pid` at `sample`, as recorded."""
    snap = recorded(path)
    return next(s for s in snap.joined(ALL_STACKS) if s.pid == pid and s.sample == sample)


def stack(
    path: Path,
    pid: int,
    sample: int = 0,
    *,
    as_pid: int | None = None,
    as_sample: int | None = None,
) -> StackObs:
    """The recorded observation of `pid` at `sample`, on the tests' node (NODE), moved to `as_pid`
    / `as_sample` when given (`transforms.stack_relabelled`)."""
    obs = recorded_stack(path, pid, sample)
    return tf.stack_relabelled(  # type: ignore[no-any-return]
        obs,
        pid=pid if as_pid is None else as_pid,
        sample=sample if as_sample is None else as_sample,
        node_ip=NODE,
    )


def stacks(path: Path, *pids: int, samples: tuple[int, ...] = (0, 1)) -> tuple[StackObs, ...]:
    """The recorded observations of `pids` at each of `samples`, on the tests' node."""
    return tuple(stack(path, pid, s) for s in samples for pid in pids)


def main_thread(path: Path, pid: int, sample: int = 0) -> ThreadStack:
    """The recorded main thread of `pid` at `sample`."""
    obs = recorded_stack(path, pid, sample)
    return next(t for t in obs.stack.threads if t.name == "MainThread")


def process(
    path: Path, pid: int, sample: int = 0, *, as_pid: int | None = None, ppid: int | None = None
) -> ProcessInfo:
    """The recorded process-table row of `pid` at `sample`, on the tests' node, moved to `as_pid`
    (with parent `ppid`) when given (`transforms.process_relabelled`)."""
    snap = recorded(path)
    info = next(p for p in snap.processes_at(sample) if p.pid == pid)
    if as_pid is None:
        return tf.process_relabelled(info, pid=pid, ppid=info.ppid, node_ip=NODE)  # type: ignore[no-any-return]
    return tf.process_relabelled(info, pid=as_pid, ppid=ppid, node_ip=NODE)  # type: ignore[no-any-return]


def log_heads(path: Path, pid: int) -> tuple[Observed[ActorLogHead], ...]:
    """The recorded heads of `pid`'s worker log (the `actor_log_head` source), on the tests' node
    (`transforms.log_head_relabelled`)."""
    return tuple(
        tf.log_head_relabelled(h, node_ip=NODE)
        for h in recorded(path).facts(LOG_HEADS)
        if h.fact.pid == pid
    )


def processes(
    path: Path, sample: int = 0, *, without: frozenset[int] = frozenset()
) -> Observed[tuple[ProcessInfo, ...]]:
    """The recorded process table of `sample`, every row on the tests' node; `without`: as read
    once those pids had exited (`transforms.processes_without`)."""
    obs = next(o for o in recorded(path).facts(PROCESSES) if o.sample == sample)
    rows = tuple(tf.process_relabelled(p, pid=p.pid, ppid=p.ppid, node_ip=NODE) for p in obs.fact)
    moved = dataclasses.replace(obs, node_ip=NODE, fact=rows)
    return tf.processes_without(moved, without) if without else moved  # type: ignore[no-any-return]
