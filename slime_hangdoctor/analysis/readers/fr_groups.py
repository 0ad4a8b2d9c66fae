"""The flight recorder's groups as the ranks' dumps tell them: each process group's cursor per rank, the
entry the group is stuck at, and the stage that entry is (`fr_groups`, `fr_stage`). A reader because
three parts read it (flight_recorder, gpu, stacks) and the composer's stage hook does (the flight
recorder's stuck collective, parts/flight_recorder.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from slime_hangdoctor.analysis.readers.pyspy import find_stage
from slime_hangdoctor.analysis.world import World
from slime_hangdoctor.parsers.flight_recorder import FR_COMPLETED, SPEC, FrDump, FrEntry
from slime_hangdoctor.verdict import Stage


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

    pg: str  # the group's name (pg_name); the pg_id in a dump that names no group (older torch)
    cursors: tuple[FrCursor, ...]
    stuck: FrEntry | None = None  # the collective the waiting ranks are in
    behind: tuple[FrCursor, ...] = ()
    waiting: tuple[FrCursor, ...] = ()
    # the group's description for the reader: "default_pg", Megatron's "DATA_PARALLEL_GROUP"
    desc: str | None = None
    # ranks that all entered the group's newest collective, each a different one (broadcast
    # against all_reduce, slime PR#862): a mismatch, nobody behind
    mismatched: tuple[FrCursor, ...] = ()

    @property
    def label(self) -> str:
        return f"{self.pg} ({self.desc})" if self.desc else self.pg


# A group is matched across ranks by its NAME, never by pg_id: pg_id counts the groups one process
# created, so one group has different pg_ids on ranks that created different groups (Megatron's
# non-members create none). PyTorch's own analyser matches entries by `process_group[0]`
# (torch 2.13 torch/distributed/flight_recorder/components/builder.py:211-212, utils.py:110).
# `pg_status` stays keyed by the dump's own str(pg_id) (getPgStatus, torch 2.13
# include/torch/csrc/distributed/c10d/FlightRecorderDetail.hpp:483), so each
# rank's cursor is read at the pg_id its entries of that group carry.
def _group_key(e: FrEntry) -> str | None:
    if e.pg_name is not None:
        return e.pg_name
    return str(e.pg_id) if e.pg_id is not None else None  # no process_group: the pg_id is all


def _names_groups(dump: FrDump) -> bool:
    return any(e.pg_name is not None for e in dump.entries)


def _cursor(dump: FrDump, pg: str) -> FrCursor | None:
    mine = [e for e in dump.entries if _group_key(e) == pg]
    entries = [e for e in mine if not e.is_p2p and e.collective_seq_id > 0]
    pg_ids = {str(e.pg_id) for e in mine if e.pg_id is not None}
    if not _names_groups(dump):
        pg_ids = {pg}  # a dump that names no group: the key is the pg_id, as pg_status's
    # in a dump that names its groups, a status whose group has no entry left in the ring buffer
    # has no name: it cannot be matched across ranks, and is left out
    status = next((dump.pg_status[i] for i in sorted(pg_ids) if i in dump.pg_status), {})
    enq = status.get("last_enqueued_collective")
    done = status.get("last_completed_collective")
    if enq is None:
        enq = max((e.collective_seq_id for e in entries), default=None)
    if done is None:
        done = max((e.collective_seq_id for e in entries if e.state == FR_COMPLETED), default=0)
    if enq is None:
        return None
    pending = [e for e in entries if e.state != FR_COMPLETED and e.collective_seq_id > done]
    return FrCursor(
        dump.rank,
        dump.pid,
        int(enq),
        int(done),
        max(pending, key=lambda e: e.collective_seq_id) if pending else None,
    )


def _desc(dumps: Sequence[FrDump], pg: str) -> str | None:
    for d in dumps:
        for e in d.entries:
            if e.pg_name == pg and e.pg_desc and e.pg_desc != "undefined":
                return e.pg_desc
        if desc := d.pg_config.get(pg, {}).get("desc"):
            return desc
    return None


def fr_groups(world: World) -> list[FrGroup]:
    dumps: dict[int, FrDump] = {f.fact.rank: f.fact for f in world.snapshot.facts(SPEC)}
    pgs = sorted(
        {k for d in dumps.values() for e in d.entries if (k := _group_key(e)) is not None}
        | {pg for d in dumps.values() if not _names_groups(d) for pg in d.pg_status}
    )
    out: list[FrGroup] = []
    for pg in pgs:
        cursors = tuple(c for c in (_cursor(d, pg) for d in dumps.values()) if c is not None)
        desc = _desc(tuple(dumps.values()), pg)
        if len(cursors) < 2:
            out.append(FrGroup(pg, cursors, desc=desc))
            continue
        top = max(c.enqueued for c in cursors)
        waiting = tuple(c for c in cursors if c.enqueued > c.completed)
        behind = tuple(c for c in cursors if c.enqueued < top)
        stuck = next(
            (c.pending for c in waiting if c.pending is not None and c.enqueued == top), None
        )
        at_top = [c for c in waiting if c.pending is not None and c.enqueued == top]
        ops = {_signature(c.pending) for c in at_top if c.pending is not None}
        mismatched = tuple(at_top) if not behind and len(ops) > 1 else ()
        out.append(
            FrGroup(pg, cursors, stuck, behind if waiting else (), waiting, desc, mismatched)
        )
    return out


def waits_in(groups: list[FrGroup], other: FrGroup, rank: int) -> FrGroup | None:
    """Another group whose stuck collective `rank` waits in while some rank there is behind."""
    for g in groups:
        if g is other or g.stuck is None or not g.behind:
            continue
        if any(c.rank == rank for c in g.waiting) and all(c.rank != rank for c in g.behind):
            return g
    return None


def _signature(e: FrEntry) -> str:
    """What must agree across the ranks for one collective of a group: its op (the recorder's
    profiling name, `nccl:broadcast`, `gloo:all_reduce`)."""
    return e.op


def fr_stage(entry: FrEntry | None) -> Stage | None:
    if entry is None:
        return None
    stage, _, _ = find_stage(entry.frames)
    return stage
