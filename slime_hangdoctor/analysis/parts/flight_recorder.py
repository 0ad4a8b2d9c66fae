"""The flight recorder: a rank whose last enqueued collective is behind its peers', while they wait
in the next one (a cascade over several process groups blames the root, not the victims)."""

from __future__ import annotations

from collections.abc import Sequence

from slime_hangdoctor.analysis.readers.fr_groups import (
    FrCursor,
    FrGroup,
    fr_groups,
    fr_stage,
    waits_in,
)
from slime_hangdoctor.analysis.source_analysis import (
    STRONG,
    Evidence,
    Reads,
    Source,
    SourceAnalysis,
    StageRank,
    Suspect,
    suspect,
)
from slime_hangdoctor.analysis.world import Proc, World
from slime_hangdoctor.parsers.flight_recorder import FrEntry
from slime_hangdoctor.verdict import Role, Stage

FLIGHT_RECORDER = Source("flight_recorder")  # torch's NCCL flight recorder dumps

MESSAGES = {
    "fr-collective-not-joined": "The flight recorder shows ranks waiting in a collective others never entered",
    "fr-collective-not-completing": "The flight recorder shows a collective every rank entered and none completed",
    "fr-collective-mismatch": "The flight recorder shows the ranks posted different collectives at the same sequence number",
}


def _fr_entry_text(e: FrEntry) -> str:
    callers = [f.name for f in e.frames if "torch/distributed" not in f.filename][:3]
    return f"collective #{e.collective_seq_id} {e.op} ({e.state})" + (
        f" called from {' <- '.join(callers)}" if callers else ""
    )


def _rank_proc(world: World, c: FrCursor) -> Proc | None:
    return world.find(c.pid) if c.pid is not None else world.train_rank(c.rank)


def _rank_suspect(
    c: FrCursor, why: str, proc: Proc | None, *, stage: Stage | None, **kw: object
) -> Suspect:
    """A rank the flight recorder names, strongly: its process where the world has one."""
    role = proc.role if proc and proc.role else Role.TRAIN_RANK
    return suspect(
        FLIGHT_RECORDER, role, why, proc, pid=c.pid, rank=c.rank, stage=stage, weight=STRONG, **kw
    )


def _cursors(g: FrGroup) -> tuple[str, ...]:
    """Every rank's cursor in `g`: its last collective enqueued, completed and in flight."""
    return tuple(
        f"rank {x.rank}: last enqueued #{x.enqueued}, last completed #{x.completed}"
        + (f", in flight: {_fr_entry_text(x.pending)}" if x.pending else "")
        for x in g.cursors
    )


def _mismatch_suspects(world: World, g: FrGroup) -> list[Suspect]:
    """Every rank of a mismatched collective: no rank is behind, each posted another one."""
    posted = "; ".join(
        f"rank {c.rank} posted {_fr_entry_text(c.pending)}" for c in g.mismatched if c.pending
    )
    return [
        _rank_suspect(
            c,
            f"flight recorder: on process group {g.label} the ranks' collective "
            f"#{c.enqueued} do not match ({posted}): every rank entered it and each waits "
            "for the others' one",
            _rank_proc(world, c),
            stage=fr_stage(c.pending),
            evidence=_cursors(g),
        )
        for c in g.mismatched
    ]


def _returned_behind(world: World, g: FrGroup) -> list[str]:
    """Why each rank behind in `g` has returned, where every one of them has (else [])."""
    out: list[str] = []
    for c in g.behind:
        proc = _rank_proc(world, c)
        why = world.returned(proc) if proc is not None else None
        if why is None:
            return []
        out.append(why)
    return out


def _ahead_suspects(world: World, g: FrGroup, gone: list[str]) -> list[Suspect]:
    """The ranks that wait in a collective their returned peers never enter: on a path they
    did not take."""
    stuck = g.stuck
    assert stuck is not None
    return [
        _rank_suspect(
            c,
            f"flight recorder: rank {c.rank} waits in {_fr_entry_text(stuck)} on process "
            f"group {g.label}, which its peers never will: {'; '.join(gone)}. It is on a "
            "path its peers did not take",
            _rank_proc(world, c),
            stage=fr_stage(stuck),
        )
        for c in g.waiting
    ]


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
            own = waits_in(groups, g, c.rank) if not any_root else None
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
                _rank_suspect(
                    c,
                    why,
                    proc,
                    stage=stage,
                    evidence=_cursors(g),
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


def stuck_stage(world: World) -> Stage | None:
    """The stage of the collective a group behind is stuck at: it outranks the stacks' vote (a
    rank that left the collective's frame still waits in it)."""
    for g in fr_groups(world):
        if g.behind and g.stuck is not None:
            stage = fr_stage(g.stuck)
            if stage is not None:
                return stage
    return None


ANALYSIS = SourceAnalysis(
    name="flight_recorder",
    gives=(FLIGHT_RECORDER,),
    suspects=suspects,
    evidence=evidence,
    messages=MESSAGES,
    stage=stuck_stage,
    stage_rank=StageRank.FIRST,
)
