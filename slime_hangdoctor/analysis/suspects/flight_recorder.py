"""The flight recorder: a rank whose last enqueued collective is behind its peers', while they wait
in the next one (a cascade over several process groups blames the root, not the victims)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from slime_hangdoctor.analysis.stacks import find_stage
from slime_hangdoctor.analysis.suspects.suspect import (
    STRONG,
    Evidence,
    Suspect,
    SuspectInputs,
    suspect,
)
from slime_hangdoctor.analysis.world import World
from slime_hangdoctor.facts import FrDump, FrEntry
from slime_hangdoctor.parsers.flight_recorder import SPEC as FLIGHT_RECORDER
from slime_hangdoctor.verdict import Role, Stage

MESSAGES = {
    "fr-collective-not-joined": "The flight recorder shows ranks waiting in a collective others never entered",
    "fr-collective-not-completing": "The flight recorder shows a collective every rank entered and none completed",
}


@dataclass(frozen=True)
class FrCursor:
    rank: int
    pid: int | None
    enqueued: int
    completed: int
    pending: FrEntry | None  # the newest entry that has not completed


@dataclass(frozen=True)
class FrGroup:
    """One process group across the ranks that dumped it."""

    pg: str
    cursors: tuple[FrCursor, ...]
    stuck: FrEntry | None = None  # the collective the waiting ranks are in
    behind: tuple[FrCursor, ...] = ()
    waiting: tuple[FrCursor, ...] = ()


def _cursor(dump: FrDump, pg: str) -> FrCursor | None:
    entries = [
        e for e in dump.entries if str(e.pg_id) == pg and not e.is_p2p and e.collective_seq_id > 0
    ]
    status = dump.pg_status.get(pg, {})
    enq = status.get("last_enqueued_collective")
    done = status.get("last_completed_collective")
    if enq is None:
        enq = max((e.collective_seq_id for e in entries), default=None)
    if done is None:
        done = max((e.collective_seq_id for e in entries if e.state == "completed"), default=0)
    if enq is None:
        return None
    pending = [e for e in entries if e.state != "completed" and e.collective_seq_id > done]
    return FrCursor(
        dump.rank,
        dump.pid,
        int(enq),
        int(done),
        max(pending, key=lambda e: e.collective_seq_id) if pending else None,
    )


def fr_groups(world: World) -> list[FrGroup]:
    dumps: dict[int, FrDump] = {f.fact.rank: f.fact for f in world.snapshot.facts(FLIGHT_RECORDER)}
    pgs = sorted(
        {str(e.pg_id) for d in dumps.values() for e in d.entries if e.pg_id is not None}
        | {pg for d in dumps.values() for pg in d.pg_status}
    )
    out: list[FrGroup] = []
    for pg in pgs:
        cursors = tuple(c for c in (_cursor(d, pg) for d in dumps.values()) if c is not None)
        if len(cursors) < 2:
            out.append(FrGroup(pg, cursors))
            continue
        top = max(c.enqueued for c in cursors)
        waiting = tuple(c for c in cursors if c.enqueued > c.completed)
        behind = tuple(c for c in cursors if c.enqueued < top)
        stuck = next(
            (c.pending for c in waiting if c.pending is not None and c.enqueued == top), None
        )
        out.append(FrGroup(pg, cursors, stuck, behind if waiting else (), waiting))
    return out


def fr_stage(entry: FrEntry | None) -> Stage | None:
    if entry is None:
        return None
    stage, _, _ = find_stage(entry.frames)
    return stage


def _fr_entry_text(e: FrEntry) -> str:
    callers = [f.name for f in e.frames if "torch/distributed" not in f.filename][:3]
    return f"collective #{e.collective_seq_id} {e.op} ({e.state})" + (
        f" called from {' <- '.join(callers)}" if callers else ""
    )


def suspects(reads: SuspectInputs) -> list[Suspect]:
    world = reads.world
    out: list[Suspect] = []
    groups = fr_groups(world)
    # a rank with a collective in flight in some group waits there: behind elsewhere is a cascade
    in_flight = {c.rank for g in groups for c in g.cursors if c.pending is not None}
    any_root = any(c.rank not in in_flight for g in groups if g.stuck is not None for c in g.behind)
    for g in groups:
        if not g.behind or g.stuck is None:
            continue
        roots = [c for c in g.behind if c.rank not in in_flight or not any_root]
        stage = fr_stage(g.stuck)
        peers = ", ".join(
            f"rank {c.rank} (enqueued #{c.enqueued}, completed #{c.completed})" for c in g.waiting
        )
        for c in roots:
            proc = world.find(c.pid) if c.pid is not None else None
            if proc is None:
                proc = world.train_rank(c.rank)
            why = (
                f"flight recorder: rank {c.rank} never entered {_fr_entry_text(g.stuck)} on "
                f"process group {g.pg}; its last collective is #{c.enqueued} while {peers} wait"
            )
            out.append(
                suspect(
                    "flight_recorder",
                    proc.role if proc and proc.role else Role.TRAIN_RANK,
                    why,
                    proc,
                    pid=c.pid,
                    rank=c.rank,
                    stage=stage,
                    weight=STRONG,
                    evidence=tuple(
                        f"rank {x.rank}: last enqueued #{x.enqueued}, last completed "
                        f"#{x.completed}"
                        + (f", in flight: {_fr_entry_text(x.pending)}" if x.pending else "")
                        for x in g.cursors
                    ),
                )
            )
    return out


def evidence(reads: SuspectInputs, suspects: Sequence[Suspect]) -> list[Evidence]:
    world = reads.world
    out: list[Evidence] = []
    for g in fr_groups(world):
        if g.stuck is None or not g.waiting:
            continue
        if g.behind:
            text = (
                f"flight recorder, group {g.pg}: ranks "
                f"{', '.join(str(c.rank) for c in g.waiting)} wait in collective "
                f"#{g.stuck.collective_seq_id} {g.stuck.op} that ranks "
                f"{', '.join(str(c.rank) for c in g.behind)} never entered"
            )
            out.append(Evidence("flight_recorder", "fr-collective-not-joined", text, 2))
        else:
            out.append(
                Evidence(
                    "flight_recorder",
                    "fr-collective-not-completing",
                    f"flight recorder, group {g.pg}: every rank entered collective "
                    f"#{g.stuck.collective_seq_id} {g.stuck.op} and none completed it",
                    1,
                )
            )
    return out
