"""The flight recorder: a rank whose last enqueued collective is behind its peers', while they wait
in the next one (a cascade over several process groups blames the root, not the victims)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from slime_hangdoctor.analysis.readers.pyspy import find_stage
from slime_hangdoctor.analysis.source_analysis import (
    STRONG,
    Evidence,
    Reads,
    Source,
    SourceAnalysis,
    Suspect,
    suspect,
)
from slime_hangdoctor.analysis.world import World
from slime_hangdoctor.parsers.flight_recorder import FR_COMPLETED, SPEC, FrDump, FrEntry
from slime_hangdoctor.verdict import Role, Stage

FLIGHT_RECORDER = Source("flight_recorder")  # torch's NCCL flight recorder dumps

MESSAGES = {
    "fr-collective-not-joined": "The flight recorder shows ranks waiting in a collective others never entered",
    "fr-collective-not-completing": "The flight recorder shows a collective every rank entered and none completed",
    "fr-collective-mismatch": "The flight recorder shows the ranks posted different collectives at the same sequence number",
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


def _waits_in(groups: list[FrGroup], other: FrGroup, rank: int) -> FrGroup | None:
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


def _fr_entry_text(e: FrEntry) -> str:
    callers = [f.name for f in e.frames if "torch/distributed" not in f.filename][:3]
    return f"collective #{e.collective_seq_id} {e.op} ({e.state})" + (
        f" called from {' <- '.join(callers)}" if callers else ""
    )


def _mismatch_suspects(world: World, g: FrGroup) -> list[Suspect]:
    """Every rank of a mismatched collective: no rank is behind, each posted another one."""
    posted = "; ".join(
        f"rank {c.rank} posted {_fr_entry_text(c.pending)}" for c in g.mismatched if c.pending
    )
    out: list[Suspect] = []
    for c in g.mismatched:
        proc = world.find(c.pid) if c.pid is not None else world.train_rank(c.rank)
        out.append(
            suspect(
                FLIGHT_RECORDER,
                proc.role if proc and proc.role else Role.TRAIN_RANK,
                f"flight recorder: on process group {g.label} the ranks' collective "
                f"#{c.enqueued} do not match ({posted}): every rank entered it and each waits "
                "for the others' one",
                proc,
                pid=c.pid,
                rank=c.rank,
                stage=fr_stage(c.pending),
                weight=STRONG,
                evidence=tuple(
                    f"rank {x.rank}: last enqueued #{x.enqueued}, last completed #{x.completed}"
                    + (f", in flight: {_fr_entry_text(x.pending)}" if x.pending else "")
                    for x in g.cursors
                ),
            )
        )
    return out


def _returned_behind(world: World, g: FrGroup) -> list[str]:
    """Why each rank behind in `g` has returned, where every one of them has (else [])."""
    out: list[str] = []
    for c in g.behind:
        proc = world.find(c.pid) if c.pid is not None else world.train_rank(c.rank)
        why = world.returned(proc) if proc is not None else None
        if why is None:
            return []
        out.append(why)
    return out


def _ahead_suspects(world: World, g: FrGroup, gone: list[str]) -> list[Suspect]:
    """The ranks that wait in a collective their returned peers never enter: on a path they
    did not take."""
    assert g.stuck is not None
    out: list[Suspect] = []
    for c in g.waiting:
        proc = world.find(c.pid) if c.pid is not None else world.train_rank(c.rank)
        out.append(
            suspect(
                FLIGHT_RECORDER,
                proc.role if proc and proc.role else Role.TRAIN_RANK,
                f"flight recorder: rank {c.rank} waits in {_fr_entry_text(g.stuck)} on process "
                f"group {g.label}, which its peers never will: {'; '.join(gone)}. It is on a "
                "path its peers did not take",
                proc,
                pid=c.pid,
                rank=c.rank,
                stage=fr_stage(g.stuck),
                weight=STRONG,
            )
        )
    return out


def suspects(reads: Reads) -> list[Suspect]:
    world = reads.world
    out: list[Suspect] = []
    groups = fr_groups(world)
    for g in groups:
        if g.mismatched:
            out += _mismatch_suspects(world, g)
    # a rank with a collective in flight in some group waits there: behind elsewhere is a cascade
    in_flight = {c.rank for g in groups for c in g.cursors if c.pending is not None}
    any_root = any(c.rank not in in_flight for g in groups if g.stuck is not None for c in g.behind)
    for g in groups:
        if not g.behind or g.stuck is None:
            continue
        if gone := _returned_behind(world, g):
            out += _ahead_suspects(world, g, gone)
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
                f"process group {g.label}; its last collective is #{c.enqueued} while {peers} wait"
            )
            own = _waits_in(groups, g, c.rank) if not any_root else None
            if own is not None and own.stuck is not None:
                # every rank behind somewhere waits itself in another group's collective that
                # its peers there never entered: the ranks posted their collectives in different
                # orders, each waits for the other (slime PR#862's broadcasts on slime's gloo
                # group against the step's all_reduce on the default group)
                why += (
                    f"; and rank {c.rank} itself waits in {_fr_entry_text(own.stuck)} on process "
                    f"group {own.label}, which its peers there never entered: the ranks posted "
                    "their collectives in different orders and each waits for the other"
                )
            out.append(
                suspect(
                    FLIGHT_RECORDER,
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


def evidence(reads: Reads, suspects: Sequence[Suspect]) -> list[Evidence]:
    world = reads.world
    out: list[Evidence] = []
    for g in fr_groups(world):
        if g.stuck is None or not g.waiting:
            continue
        if g.mismatched:
            posted = "; ".join(
                f"rank {c.rank}: {_fr_entry_text(c.pending)}" for c in g.mismatched if c.pending
            )
            text = (
                f"flight recorder, group {g.label}: the ranks posted different collectives as "
                f"#{g.mismatched[0].enqueued} ({posted})"
            )
            out.append(Evidence(FLIGHT_RECORDER, "fr-collective-mismatch", text, 2))
            continue
        if g.behind:
            text = (
                f"flight recorder, group {g.label}: ranks "
                f"{', '.join(str(c.rank) for c in g.waiting)} wait in collective "
                f"#{g.stuck.collective_seq_id} {g.stuck.op} that ranks "
                f"{', '.join(str(c.rank) for c in g.behind)} never entered"
            )
            out.append(Evidence(FLIGHT_RECORDER, "fr-collective-not-joined", text, 2))
        else:
            out.append(
                Evidence(
                    FLIGHT_RECORDER,
                    "fr-collective-not-completing",
                    f"flight recorder, group {g.label}: every rank entered collective "
                    f"#{g.stuck.collective_seq_id} {g.stuck.op} and none completed it",
                    1,
                )
            )
    return out


ANALYSIS = SourceAnalysis(
    name="flight_recorder",
    gives=(FLIGHT_RECORDER,),
    suspects=suspects,
    evidence=evidence,
    messages=MESSAGES,
)
