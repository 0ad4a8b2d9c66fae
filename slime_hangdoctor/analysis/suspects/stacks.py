"""Stacks: the process that is not in the collective its peers (train ranks, one engine's
schedulers) wait in, or the odd collective out; and "every slime process is waiting"."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from slime_hangdoctor.analysis.signatures import Block, split_name
from slime_hangdoctor.analysis.stacks import ProcessRead
from slime_hangdoctor.analysis.suspects.suspect import (
    MEDIUM,
    WEAK,
    Evidence,
    Suspect,
    SuspectInputs,
    brief,
    suspect,
)
from slime_hangdoctor.analysis.world import Proc, World
from slime_hangdoctor.verdict import Role

MESSAGES = {
    "all-waiting": "Every slime process is waiting; none is working",
}


def _op_of(read: ProcessRead) -> str:
    """The collective a process waits in: the Python call that issued the wait. With --native the
    wait itself is a native frame that every op shares (`c10d::Work::wait` under all_reduce,
    barrier and all_gather alike), so the first Python frame from it outwards names the op."""
    t = read.primary
    if t.block_index is None:
        return read.block.value
    f = next((f for f in t.frames[t.block_index :] if not f.native), t.frames[t.block_index])
    return split_name(f.name)[1]


def peer_groups(world: World) -> list[list[Proc]]:
    """Processes that run collectives together: the train ranks; the schedulers of one engine."""
    groups = [[p for p in world.train_ranks() if p.latest is not None]]
    engines: dict[str, list[Proc]] = {}
    for p in world.by_role(Role.SGLANG_ENGINE):
        if p.kind == "scheduler" and p.latest is not None and p.engine_url:
            engines.setdefault(p.engine_url, []).append(p)
    groups += list(engines.values())
    return [g for g in groups if len(g) >= 2]


def suspects(reads: SuspectInputs) -> list[Suspect]:
    world = reads.world
    out: list[Suspect] = []
    for group in peer_groups(world):
        out += _odd_ones(group, world)
    return out


def _children(world: World, p: Proc) -> list[Proc]:
    """The processes `p` forked whose stacks were read (a rank's checkpoint writer), at most 2."""
    return [c for c in world.children_of(p) if c.latest is not None][:2]


def children_text(world: World, p: Proc) -> str:
    """Where the processes `p` forked wait (a rank waiting for its checkpoint writer)."""
    return "".join(f"; its child {c.label} is {brief(c)}" for c in _children(world, p))


def _odd_ones(ranks: list[Proc], world: World) -> list[Suspect]:
    in_coll = [p for p in ranks if p.latest is not None and p.latest.primary.in_collective]
    if not in_coll:
        return []
    role = ranks[0].role or Role.TRAIN_RANK
    outside = [p for p in ranks if p not in in_coll]
    if outside and all(p.latest is not None and p.latest.primary.in_intake for p in outside):
        return _awaited_by_intake(in_coll, outside, role)
    returned = {p.pid: why for p in outside if (why := world.returned(p)) is not None}
    if outside and len(returned) == len(outside):
        return _on_a_path_the_others_left(in_coll, outside, returned, role)
    outside = [p for p in outside if p.pid not in returned]
    if outside:
        victims = ", ".join(f"{p.label} ({brief(p)})" for p in in_coll[:4])
        weight = MEDIUM if len(outside) <= len(in_coll) else WEAK
        return [
            suspect(
                "stacks",
                role,
                f"stacks: {p.label} is not in the collective its peers wait in; it is "
                f"{p.latest.describe() if p.latest else '?'}{children_text(world, p)} "
                f"(peers: {victims})",
                p,
                weight=weight,
                stage=p.latest.stage if p.latest else None,
                waits_elsewhere=p.latest is not None
                and p.latest.block
                in (
                    Block.RAY_GET,
                    Block.HTTP,
                    Block.WAIT,
                ),
                evidence=tuple(
                    f"{q.label}: {brief(q)}" for q in (*ranks[:8], *_children(world, p))
                ),
            )
            for p in outside
        ]
    return _collective_minority(in_coll, role)


def _on_a_path_the_others_left(
    in_coll: list[Proc], gone: list[Proc], why: dict[int, str], role: Role
) -> list[Suspect]:
    """Every peer outside the collective has returned (its Ray task ended, its worker idle): it
    will never enter it. The ranks that wait there are on a path their peers did not take (one
    more step, a collective called by some ranks only): they are the ones to look at."""
    left = "; ".join(why[p.pid] for p in gone[:4])
    return [
        suspect(
            "stacks",
            role,
            f"stacks: {p.label} waits in {_op_of(p.latest) if p.latest else '?'} "
            f"({p.latest.describe() if p.latest else '?'}), a collective its peers will never "
            f"enter: {left}. It is on a path its peers did not take",
            p,
            weight=MEDIUM,
            stage=p.latest.stage if p.latest else None,
            evidence=tuple(f"{q.label}: {brief(q)}" for q in (*in_coll, *gone)[:8]),
        )
        for p in in_coll
    ]


def _awaited_by_intake(in_coll: list[Proc], intake: list[Proc], role: Role) -> list[Suspect]:
    """One engine's schedulers: the ranks outside the collective wait in `broadcast_pyobj` for the
    next requests of the rank that is in it (sglang#30760: TP rank 0 in the prefetch check's
    all_reduce, which the other ranks left for the next loop). They wait for it: it is the one."""
    waiting = ", ".join(f"{p.label} (pid {p.pid})" for p in intake[:4])
    return [
        suspect(
            "stacks",
            role,
            f"stacks: {p.label} (pid {p.pid}) waits in {_op_of(p.latest) if p.latest else '?'}"
            f" ({p.latest.describe() if p.latest else '?'}), a collective its TP peers never "
            f"enter: they wait in broadcast_pyobj for its next requests ({waiting})",
            p,
            weight=MEDIUM,
            stage=p.latest.stage if p.latest else None,
            evidence=tuple(f"{q.label} (pid {q.pid}): {brief(q)}" for q in (*in_coll, *intake)[:8]),
        )
        for p in in_coll
    ]


def _collective_minority(in_coll: list[Proc], role: Role) -> list[Suspect]:
    """All ranks wait in collectives: the odd op out, when the ranks are in one stage."""
    stages = {p.latest.stage for p in in_coll if p.latest}
    if len(stages) != 1:
        return []
    groups = Counter(_op_of(p.latest) for p in in_coll if p.latest)
    if len(groups) < 2:
        return []
    (top_op, top_n), *_ = groups.most_common()
    minority = [p for p in in_coll if p.latest and _op_of(p.latest) != top_op]
    if len(minority) >= top_n:
        return []
    return [
        suspect(
            "stacks",
            role,
            f"stacks: {p.label} waits in {_op_of(p.latest) if p.latest else '?'} while "
            f"{top_n} peers wait in {top_op}: the peers issued different collectives",
            p,
            weight=WEAK,
            stage=p.latest.stage if p.latest else None,
            evidence=tuple(f"{q.label}: {brief(q)}" for q in in_coll[:8]),
        )
        for p in minority
    ]


def evidence(reads: SuspectInputs, suspects: Sequence[Suspect]) -> list[Evidence]:
    world, progress = reads.world, reads.progress
    procs = [p for p in world.procs if p.role is not None and p.latest is not None]
    if len(procs) < 2 or progress.moving:
        return []
    for p in procs:
        read = p.latest
        if read is None or read.cpu_busy:
            return []
    return [
        Evidence(
            "stacks",
            "all-waiting",
            "every slime process is waiting: "
            + "; ".join(
                f"{p.label}: {p.latest.describe() if p.latest else '?'}" for p in procs[:6]
            ),
            1,
        )
    ]
