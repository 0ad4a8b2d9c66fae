"""Stacks: the process that is not in the collective its peers (train ranks, one engine's
schedulers) wait in, or the odd collective out; and, between the samples, a process that moved to
another stage (work) or sat in the same wait (frozen)."""

from __future__ import annotations

from collections import Counter

from slime_hangdoctor.analysis.engines import EngineRead
from slime_hangdoctor.analysis.progress import Moved, Proof, Signal
from slime_hangdoctor.analysis.signatures import Block, split_name
from slime_hangdoctor.analysis.source_analysis import (
    MEDIUM,
    WEAK,
    Reads,
    SourceAnalysis,
    Suspect,
    brief,
    suspect,
)
from slime_hangdoctor.analysis.stacks import STACKS, ProcessRead
from slime_hangdoctor.analysis.world import Proc, World
from slime_hangdoctor.topology import MemberKind
from slime_hangdoctor.verdict import Role


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
        if p.kind is MemberKind.SCHEDULER and p.latest is not None and p.engine_url:
            engines.setdefault(p.engine_url, []).append(p)
    groups += list(engines.values())
    return [g for g in groups if len(g) >= 2]


def suspects(reads: Reads) -> list[Suspect]:
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
    if outside:
        victims = ", ".join(f"{p.label} ({brief(p)})" for p in in_coll[:4])
        weight = MEDIUM if len(outside) <= len(in_coll) else WEAK
        return [
            suspect(
                STACKS,
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


def _awaited_by_intake(in_coll: list[Proc], intake: list[Proc], role: Role) -> list[Suspect]:
    """One engine's schedulers: the ranks outside the collective wait in `broadcast_pyobj` for the
    next requests of the rank that is in it (sglang#30760: TP rank 0 in the prefetch check's
    all_reduce, which the other ranks left for the next loop). They wait for it: it is the one."""
    waiting = ", ".join(f"{p.label} (pid {p.pid})" for p in intake[:4])
    return [
        suspect(
            STACKS,
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
            STACKS,
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


def progress(world: World, engines: tuple[EngineRead, ...]) -> Moved:
    """Each process stacked at both samples: moved to another stage (work), changed within the
    same stage (activity), or the same stack in both (frozen, but for an idle worker)."""
    moved: list[Signal] = []
    activity: list[Signal] = []
    frozen: list[Signal] = []
    for p in world.procs:
        first, last = p.first, p.latest
        if first is None or last is None or first.sample == last.sample:
            continue
        if first.stage is not None and last.stage is not None and first.stage != last.stage:
            moved.append(
                Signal(STACKS, p.label, f"moved from {first.stage.value} to {last.stage.value}")
            )
        elif first.primary.key() != last.primary.key():
            activity.append(Signal(STACKS, p.label, "stack changed within the same stage"))
        elif last.block is not Block.IDLE_WORKER:
            frozen.append(Signal(STACKS, p.label, "identical stack in both samples"))
    compared = bool(moved or activity or frozen)
    return Moved(Proof.STAGE, tuple(moved), tuple(activity), tuple(frozen), compared)


ANALYSIS = SourceAnalysis(
    name="stacks",
    gives=(STACKS,),
    progress=progress,
    suspects=suspects,
)
