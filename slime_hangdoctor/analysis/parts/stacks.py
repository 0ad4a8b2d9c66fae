"""Stacks: the process that is not in the collective its peers (train ranks, one engine's
schedulers) wait in, or the odd collective out; and, between the samples, a process that moved to
another stage (work) or sat in the same wait (frozen)."""

from __future__ import annotations

from collections.abc import Sequence

from slime_hangdoctor.analysis.readers.fr_groups import fr_groups
from slime_hangdoctor.analysis.readers.nvml import GpuState
from slime_hangdoctor.analysis.readers.proof import Moved, Proof, Signal
from slime_hangdoctor.analysis.readers.pyspy import STACKS, ProcessRead
from slime_hangdoctor.analysis.signatures import Block, split_name
from slime_hangdoctor.analysis.source_analysis import (
    MEDIUM,
    WEAK,
    Evidence,
    Reads,
    SourceAnalysis,
    Suspect,
    brief,
    suspect,
    waits_on_io,
)
from slime_hangdoctor.analysis.world import Proc, World, children_read, children_text
from slime_hangdoctor.parsers.flight_recorder import SPEC as FLIGHT_RECORDER_SPEC
from slime_hangdoctor.topology import MemberKind
from slime_hangdoctor.verdict import Role

MESSAGES = {
    "collective-mismatch": (
        "Ranks wait in different collectives, and nothing says which rank took the wrong path "
        "(weak: arm the flight recorder)"
    ),
}

# What shows which rank is behind when the stacks cannot (ranks in different collectives, or
# waiting at a later sync point than the collective): torch's flight recorder, armed in the job's
# environment, and read with `attach --flight-recorder` (NCCL RAS counts too, on NCCL >= 2.24)
ARM_FLIGHT_RECORDER = (
    "arm the flight recorder in every rank's environment (TORCH_FR_BUFFER_SIZE=2000, "
    "TORCH_FR_DUMP_TEMP_FILE=/tmp/fr_rank_, TORCH_NCCL_DEBUG_INFO_PIPE_FILE=/tmp/frpipe_; "
    "TORCH_NCCL_ENABLE_TIMING=1 on NCCL) and run `slime-hangdoctor attach --flight-recorder`: its "
    "per-group sequence numbers show which rank posted which collective"
)


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


def _in_collective(p: Proc) -> bool:
    """Its stack waits in a collective; or, whatever its Python frame, its GPU busy-waits in one
    (NVML: util ~100 %, memory util ~0, no data moved): with NCCL a rank's CPU leaves the
    collective's frame at once and waits at its next CUDA sync (`.item()`, `synchronize`), or runs
    on, while the collective's kernel spins on its GPU."""
    if p.latest is not None and p.latest.primary.in_collective:
        return True
    return p.gpu is not None and p.gpu.state is GpuState.STUCK


def _odd_ones(ranks: list[Proc], world: World) -> list[Suspect]:
    in_coll = [p for p in ranks if p.latest is not None and _in_collective(p)]
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
                STACKS,
                role,
                f"stacks: {p.label} is not in a collective frame while its peers wait in one; it "
                f"is {p.latest.describe() if p.latest else '?'}: a wait in native code that may "
                "be a collective's own (an asynchronous collective's handle.wait(), the next "
                f"CUDA sync on NCCL), weak (peers: {victims})",
                p,
                weight=WEAK,
                stage=p.latest.stage if p.latest else None,
                evidence=tuple(f"{q.label}: {brief(q)}" for q in ranks[:8]),
            )
            for p in outside
            if _parked_in_native(world, p) and not _fr_in_flight(world, p)
        ] + [
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
                    f"{q.label}: {brief(q)}" for q in (*ranks[:8], *children_read(world, p))
                ),
            )
            for p in outside
            if not _parked_in_native(world, p)
        ]
    return _collective_minority(in_coll, role)


def _fr_in_flight(world: World, p: Proc) -> bool:
    """The flight recorder shows a collective of `p`'s rank in flight: it waits in one."""
    return any(
        c.pending is not None and (c.pid == p.pid or (c.pid is None and c.rank == p.rank))
        for g in fr_groups(world)
        for c in g.cursors
    )


def _parked_in_native(world: World, p: Proc) -> bool:
    """Idle in the job's own code at every sample, in no wait primitive the signatures know: a
    native call (with plain py-spy stacks) that may be an asynchronous collective's wait; not
    where its GPU is idle (NVML), nor where the kernel shows the wait is I/O (disk sleep, a
    write into a pipe or socket nobody reads: the kernel source's own finding explains it)."""
    if p.gpu is not None and p.gpu.state is GpuState.IDLE:
        return False  # no collective kernel on its GPU (NVML): whatever it waits in, not NCCL
    if waits_on_io(world, p):
        return False  # the kernel shows the wait is I/O: its own finding explains it
    return bool(p.reads) and all(
        r.block is Block.PARKED and not r.native and not _has_children(p) for r in p.reads
    )


def _has_children(p: Proc) -> bool:
    return p.member is not None and p.kind is MemberKind.CHILD


def _on_a_path_the_others_left(
    in_coll: list[Proc], gone: list[Proc], why: dict[int, str], role: Role
) -> list[Suspect]:
    """Every peer outside the collective has returned (its Ray task ended, its worker idle): it
    will never enter it. The ranks that wait there are on a path their peers did not take (one
    more step, a collective called by some ranks only): they are the ones to look at."""
    left = "; ".join(why[p.pid] for p in gone[:4])
    return [
        suspect(
            STACKS,
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
    """One engine's schedulers: the ranks outside the collective wait in their request intake
    (`broadcast_pyobj`; a later pipeline stage's `_pull_raw_reqs`) for the next requests of the
    rank that is in it (sglang#30760: TP rank 0 in the prefetch check's all_reduce, which the other
    ranks left for the next loop; sglang#17941: PP1 waits for PP0's). They wait for it: it is the
    one."""
    waiting = ", ".join(f"{p.label} (pid {p.pid})" for p in intake[:4])
    calls = sorted(
        {split_name(f.name)[1] for q in intake if q.latest and (f := q.latest.primary.block_frame)}
    )
    peers = "pipeline peers" if calls == ["_pull_raw_reqs"] else "TP peers"
    return [
        suspect(
            STACKS,
            role,
            f"stacks: {p.label} (pid {p.pid}) waits in {_op_of(p.latest) if p.latest else '?'}"
            f" ({p.latest.describe() if p.latest else '?'}), a collective its {peers} never "
            f"enter: they wait in {' / '.join(calls) or 'their intake'} for its next requests "
            f"({waiting})",
            p,
            weight=MEDIUM,
            stage=p.latest.stage if p.latest else None,
            evidence=tuple(f"{q.label} (pid {q.pid}): {brief(q)}" for q in (*in_coll, *intake)[:8]),
        )
        for p in in_coll
    ]


def _collective_minority(in_coll: list[Proc], role: Role) -> list[Suspect]:
    """All ranks wait in collectives: no rank is named from the stacks. Ranks in different
    collectives (slime PR#393's whitening all_reduce beside a PP stage's recv, PR#862's
    mismatched broadcasts) show that some rank took a path the others did not, never which: the
    minority is as likely to be right as the majority, and with NCCL the frames are the next CUDA
    sync, not the collective. `mismatches` reports them (weak), the flight recorder's sequence
    numbers and NCCL RAS's counts decide."""
    return []


def mismatches(world: World) -> list[str]:
    """Each peer group whose ranks, all waiting in collectives, wait in different ones: the
    ranks and their collective, in words."""
    out: list[str] = []
    for group in peer_groups(world):
        if not all(_in_collective(p) or _parked_in_native(world, p) for p in group):
            continue
        if not any(_in_collective(p) for p in group):
            continue
        if len({p.latest.stage for p in group if p.latest and p.latest.stage}) > 1:
            continue  # a weight broadcast's source and the ranks waiting for it in a barrier
        ops: dict[str, list[Proc]] = {}
        for p in group:
            if p.latest is not None:
                ops.setdefault(_wait_of(world, p), []).append(p)
        if len(ops) < 2:
            continue
        out.append(
            "; ".join(
                f"{', '.join(q.label for q in procs[:4])} in {op}" for op, procs in ops.items()
            )
        )
    return out


def _wait_of(world: World, p: Proc) -> str:
    """Where a rank waits: its collective and the call it is in."""
    read = p.latest
    if read is None:
        return "?"
    if _parked_in_native(world, p):
        return f"native code ({read.describe()}: perhaps a collective's own wait)"
    if not read.primary.in_collective:
        return f"a collective its GPU spins in ({read.describe()})"
    frame = read.primary.stage_frame or read.primary.top
    where = f" ({split_name(frame.name)[1]})" if frame is not None else ""
    return f"{_op_of(read)}{where}"


def evidence(reads: Reads, suspects: Sequence[Suspect]) -> list[Evidence]:
    """Ranks in different collectives, where no flight recorder shows which took the wrong path."""
    if reads.world.snapshot.facts(FLIGHT_RECORDER_SPEC):
        return []
    return [
        Evidence(
            STACKS,
            "collective-mismatch",
            f"stacks: {text}: the ranks are in different collectives; which rank took the wrong "
            f"path is not in the stacks. To see it, {ARM_FLIGHT_RECORDER}",
            1,
        )
        for text in mismatches(reads.world)
    ]


def progress(world: World) -> Moved:
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
                Signal(STACKS, p.label, f"moved from {first.stage.label} to {last.stage.label}")
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
    evidence=evidence,
    messages=MESSAGES,
)
