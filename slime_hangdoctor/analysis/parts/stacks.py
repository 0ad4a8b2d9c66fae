"""Stacks: the process that is not in the collective its peers (train ranks, one engine's
schedulers) wait in, or the odd collective out; an engine's scheduler still inside its batch's
forward while its TP peers, on whatever node, wait at that batch's result (`_behind_in_the_batch`);
ranks of one group that wait in different collectives at both samples, the hang's cause
(`collective_mismatch`: each side's ranks, collective and call site, and what tells the sides
apart); and, between the samples, a process that moved to another stage (work) or sat in the same
wait (frozen)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from slime_hangdoctor.analysis.merge import process_kind, tp_rank
from slime_hangdoctor.analysis.readers.fr_groups import FrCursor, FrGroup, fr_groups
from slime_hangdoctor.analysis.readers.nccl_ras import behind_by_op
from slime_hangdoctor.analysis.readers.nvml import GpuState
from slime_hangdoctor.analysis.readers.proof import Moved, Proof, Signal
from slime_hangdoctor.analysis.readers.pyspy import (
    STACKS,
    CollectiveCall,
    ProcessRead,
    collective_call,
    intake_call,
)
from slime_hangdoctor.analysis.signatures import Block, split_name
from slime_hangdoctor.analysis.signatures.sglang import BATCH_FORWARD, BATCH_RESULT
from slime_hangdoctor.analysis.source_analysis import (
    MEDIUM,
    WEAK,
    Cause,
    Evidence,
    Reading,
    Reads,
    SourceAnalysis,
    Suspect,
    brief,
    suspect,
    waits_on_io,
)
from slime_hangdoctor.analysis.world import Proc, World, children_read, children_text
from slime_hangdoctor.parsers.flight_recorder import SPEC as FLIGHT_RECORDER_SPEC
from slime_hangdoctor.parsers.nccl_ras import SPEC as RAS_SPEC
from slime_hangdoctor.topology import MemberKind
from slime_hangdoctor.verdict import Finding, NextStep, Role, Severity, Status

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
    return world.memo("stacks.peer_groups", lambda: _peer_groups(world))


def _peer_groups(world: World) -> list[list[Proc]]:
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
        return _behind_in_the_batch(ranks)
    role = ranks[0].role or Role.TRAIN_RANK
    outside = [p for p in ranks if p not in in_coll]
    if outside and all(p.latest is not None and p.latest.primary.in_intake for p in outside):
        if _sides(ranks):
            return []  # peers mid-batch beside ranks in the intake: a mismatch, no rank blamed
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


def _batch_point(p: Proc) -> str | None:
    """Where in one batch an engine's scheduler waits, the same at every sample: "forward" (its
    innermost stage frame is the batch's forward) or "result" (the batch's result); None for a
    process that is no scheduler, that runs on a CPU, or that moved between them."""
    if p.kind is not MemberKind.SCHEDULER or not p.reads:
        return None
    points: set[str | None] = set()
    for read in p.reads:
        frame = read.primary.stage_frame
        name = split_name(frame.name)[1] if frame is not None else ""
        if read.block is Block.CPU:
            return None
        points.add(
            "result" if name in BATCH_RESULT else "forward" if name in BATCH_FORWARD else None
        )
    return points.pop() if len(points) == 1 else None


def _behind_in_the_batch(ranks: list[Proc]) -> list[Suspect]:
    """One engine's schedulers, none in a collective frame, each waiting at one point of a batch
    at every sample: those still inside the batch's forward while the others wait at its result
    (`BATCH_FORWARD`, `BATCH_RESULT`). The result waits for the forward's TP collectives, which
    the ranks in the forward have not posted: they are behind (a kernel or host call in their
    forward that never returns). Wherever the ranks are (one engine's nodes alike)."""
    where = {p.pid: _batch_point(p) for p in ranks}
    forward = [p for p in ranks if where[p.pid] == "forward"]
    result = [p for p in ranks if where[p.pid] == "result"]
    if not forward or not result or len(forward) + len(result) != len(ranks):
        return []
    waiting = ", ".join(_rank(p) for p in result[:4])
    return [
        suspect(
            STACKS,
            p.role or Role.SGLANG_ENGINE,
            f"stacks: {_rank(p)} of engine {p.engine_url} is still inside its batch's forward "
            f"({p.latest.describe() if p.latest else '?'}) at every sample, while its TP peers "
            f"wait at that batch's result for the forward's collectives ({waiting}): it has not "
            "posted them",
            p,
            weight=MEDIUM if len(forward) <= len(result) else WEAK,
            stage=p.latest.stage if p.latest else None,
            evidence=tuple(f"{_rank(q)}: {brief(q)}" for q in ranks[:8]),
        )
        for p in forward
    ]


def _rank(p: Proc) -> str:
    """`scheduler TP1 (pid 42 on 10.0.0.2)`: the process of its engine, and where it runs."""
    where = f" on {p.node_ip}" if p.node_ip else ""
    return f"{process_kind(p)} (pid {p.pid}{where})"


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
    sync, not the collective. `mismatches` reports them (weak) and `collective_mismatch` makes
    them the cause, each side with its call site; the flight recorder's sequence numbers, NCCL
    RAS's counts and NVML's spinning GPUs tell the sides apart."""
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
    """Where a rank waits: its collective and the line of the job's code that issued it (as the
    mismatch cause's sides read), else the call it is in."""
    read = p.latest
    if read is None:
        return "?"
    if _parked_in_native(world, p):
        return f"native code ({read.describe()}: perhaps a collective's own wait)"
    if not read.primary.in_collective:
        return f"a collective its GPU spins in ({read.describe()})"
    call = collective_call(read.primary)
    if read.block is Block.COLLECTIVE and call is not None:
        return call.where
    frame = read.primary.stage_frame or read.primary.top
    where = f" ({split_name(frame.name)[1]})" if frame is not None else ""
    return f"{_op_of(read)}{where}"


def evidence(reads: Reads, suspects: Sequence[Suspect]) -> list[Evidence]:
    """Ranks in different collectives, where nothing tells which took the wrong path: no flight
    recorder, and no RAS count or GPU reading that tells the sides apart (`collective_mismatches`)."""
    if reads.world.snapshot.facts(FLIGHT_RECORDER_SPEC):
        return []
    if any(m.told for m in collective_mismatches(reads.world)):
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


# --------------------------------------------------------------------------- a collective mismatch


@dataclass(frozen=True, eq=False)
class Side:
    """The ranks of a group that wait in one collective issued from one line of the job's code,
    the same at every sample; `gpu`: they wait at a CUDA sync while their GPUs busy-wait in a
    collective kernel (NVML), where an NCCL rank's CPU waits for its collective."""

    procs: tuple[Proc, ...]
    call: CollectiveCall
    gpu: bool = False
    intake: bool = False

    @property
    def who(self) -> str:
        """`train ranks 0, 1`, `train rank 2`, `scheduler TP1 (pid 7), scheduler TP3 (pid 9)`."""
        ranks = [p.rank for p in self.procs]
        if all(p.role is Role.TRAIN_RANK for p in self.procs) and None not in ranks:
            many = len(ranks) > 1
            return f"train rank{'s' if many else ''} {', '.join(str(r) for r in ranks)}"
        return ", ".join(f"{process_kind(p)} (pid {p.pid})" for p in self.procs)

    @property
    def waits(self) -> str:
        """`in all_reduce at slime/.../model.py:7 (train_one_step)`."""
        if self.gpu:
            return f"in a collective kernel their GPUs spin in, the CPU at {self.call.where}"
        if self.intake:
            return f"in {self.call.where} (the request intake: waiting for the next batch)"
        return f"in {self.call.where}"


@dataclass(frozen=True)
class Mismatch:
    """One group whose ranks wait in different collectives at both samples: each side, and what
    tells the sides apart (a flight recorder's sequence numbers, NCCL RAS's launch counts, a GPU
    spinning in a collective kernel beside idle ones): a side that entered a collective the others
    never will. Empty `told`: nothing does, and no side is blamed."""

    group: str
    sides: tuple[Side, ...]
    told: tuple[str, ...]

    @property
    def text(self) -> str:
        sides = "; ".join(f"{s.who} {s.waits}" for s in self.sides)
        return f"{self.group} wait in different collectives: {sides}"


def collective_mismatches(world: World) -> list[Mismatch]:
    """Every peer group (the train ranks, one engine's TP ranks) whose ranks wait in different
    collectives, each side stable over both samples."""
    return world.memo("stacks.mismatches", lambda: _find_mismatches(world))


def _find_mismatches(world: World) -> list[Mismatch]:
    out: list[Mismatch] = []
    for group in peer_groups(world):
        sides = _sides(group)
        if sides:
            out.append(Mismatch(_group_name(group), sides, _told(world, sides)))
    return out


def _group_name(group: list[Proc]) -> str:
    url = group[0].engine_url
    return f"the TP ranks of engine {url}" if url else "the train ranks"


def _stable_call(p: Proc) -> tuple[CollectiveCall, bool, bool] | None:
    """The collective `p` waits in at every sample, from the same line (and whether its CPU is at
    a CUDA sync while its GPU spins in a collective kernel; whether it is a TP rank's request
    intake, `intake_call`); None where it moved, waits in none, or was read at one sample only."""
    if len({r.sample for r in p.reads}) < 2:
        return None
    calls = {collective_call(r.primary) or intake_call(r.primary) for r in p.reads}
    call = calls.pop() if len(calls) == 1 else None
    if call is None or p.latest is None:
        return None
    if p.latest.primary.in_intake:
        return call, False, True
    if p.latest.block is Block.CUDA_SYNC:
        if p.gpu is None or p.gpu.state is not GpuState.STUCK:
            return None  # a CUDA sync whose GPU does not spin in a collective: not in one
        return call, True, False
    return call, False, False


def _sides(group: list[Proc]) -> tuple[Side, ...]:
    by_call: dict[tuple[CollectiveCall, bool, bool], list[Proc]] = {}
    for p in group:
        found = _stable_call(p)
        if found is None:
            return ()
        by_call.setdefault(found, []).append(p)
    if len(by_call) < 2:
        return ()
    if len({p.latest.stage for p in group if p.latest and p.latest.stage}) > 1:
        return ()  # a weight broadcast's source and the ranks waiting for it in a barrier
    sides = tuple(Side(tuple(ps), call, gpu, intake) for (call, gpu, intake), ps in by_call.items())
    if any(s.intake for s in sides) and not _mid_batch(sides):
        return ()
    return sides


def _mid_batch(sides: tuple[Side, ...]) -> bool:
    """Ranks in the request intake are a side only where their group is mid-batch: a TP rank
    other than rank 0 (a receiver of the intake's broadcast, as they are) waits in a collective
    that is not the intake (sglang#27221: TP1 beside TP0 in the decode's all_reduce while TP2-3,
    having aborted the batch on their own clocks, wait for the next one). Every rank in the intake
    is an idle engine; rank 0 alone in a collective is the one its receivers wait for, the odd
    scheduler (`_awaited_by_intake`: sglang#30760)."""
    busy = [p for s in sides if not s.intake for p in s.procs]
    return any((tp_rank(p) or 0) > 0 for p in busy)


def _side_of(sides: tuple[Side, ...], p: Proc | None) -> Side | None:
    return next((s for s in sides if p is not None and p in s.procs), None)


def _told(world: World, sides: tuple[Side, ...]) -> tuple[str, ...]:
    found = [*_told_by_fr(world, sides), *_told_by_ras(world, sides), *_told_by_gpu(sides)]
    return tuple(dict.fromkeys(found))


def _fr_proc(world: World, c: FrCursor) -> Proc | None:
    return world.find(c.pid) if c.pid is not None else world.train_rank(c.rank)


def _told_by_fr(world: World, sides: tuple[Side, ...]) -> list[str]:
    """The flight recorder: the ranks of a side posted a collective as a sequence number where the
    others posted another (a mismatch at one number), or entered one that ranks of another side
    never entered (each behind in the group the other waits in)."""
    out: list[str] = []
    for g in fr_groups(world):
        if g.mismatched:
            for c in g.mismatched:
                side = _side_of(sides, _fr_proc(world, c))
                if side is not None and c.pending is not None:
                    out.append(
                        f"flight recorder: {side.who} posted {c.pending.op} as collective "
                        f"#{c.pending.collective_seq_id} of group {g.label}, where the others "
                        "posted another collective: it entered one the others never will"
                    )
        elif g.stuck is not None and g.behind:
            out += _fr_not_joined(world, sides, g)
    return out


def _fr_not_joined(world: World, sides: tuple[Side, ...], g: FrGroup) -> list[str]:
    assert g.stuck is not None
    behind = [s for c in g.behind if (s := _side_of(sides, _fr_proc(world, c))) is not None]
    out: list[str] = []
    for side in dict.fromkeys(_side_of(sides, _fr_proc(world, c)) for c in g.waiting):
        others = [s.who for s in dict.fromkeys(behind) if s is not side]
        if side is not None and others:
            out.append(
                f"flight recorder: {side.who} entered {g.stuck.op} #{g.stuck.collective_seq_id} "
                f"of group {g.label}, which {' and '.join(others)} never entered: it entered a "
                "collective the others never will"
            )
    return out


def _frozen_comms(world: World) -> set[str]:
    """RAS communicators read at two samples or more with the same counts every time."""
    counts: dict[str, set[tuple[tuple[int, str, int], ...]]] = {}
    samples: dict[str, set[int]] = {}
    for obs in world.snapshot.facts(RAS_SPEC):
        for comm in obs.fact.communicators:
            key = tuple(
                sorted((r.rank, op, n) for r in comm.ranks for op, n in r.collective_counts.items())
            )
            counts.setdefault(comm.hash, set()).add(key)
            samples.setdefault(comm.hash, set()).add(obs.sample)
    return {h for h, keys in counts.items() if len(keys) == 1 and len(samples[h]) >= 2}


def _told_by_ras(world: World, sides: tuple[Side, ...]) -> list[str]:
    """NCCL RAS, read at both samples with the same counts: the ranks of one side launched a
    collective more often than the ranks of another side did (counts that moved, or were read
    once, prove nothing: launch skew in a busy job reads the same)."""
    frozen = _frozen_comms(world)
    latest = max((o.sample for o in world.snapshot.facts(RAS_SPEC)), default=None)
    out: list[str] = []
    for obs in world.snapshot.facts(RAS_SPEC):
        for comm in obs.fact.communicators:
            if obs.sample != latest or comm.hash not in frozen:
                continue
            for op, (behind, top) in behind_by_op(comm).items():
                late = {id(r) for r in behind}
                ahead = {
                    _side_of(sides, world.find(r.pid, r.host))
                    for r in comm.ranks
                    if id(r) not in late and not r.missing
                }
                lagging = {_side_of(sides, world.find(r.pid, r.host)) for r in behind}
                if len(ahead) != 1 or None in ahead or None in lagging or ahead & lagging:
                    continue
                (side,) = ahead
                assert side is not None
                who = " and ".join(s.who for s in lagging if s is not None)
                out.append(
                    f"NCCL RAS communicator {comm.hash}: {side.who} launched {op} up to {top}, "
                    f"{who} fewer: it entered a collective the others never will"
                )
    return out


def _told_by_gpu(sides: tuple[Side, ...]) -> list[str]:
    """NVML: every GPU of one side busy-waits in a collective kernel (util ~100 %, no memory
    traffic) while every GPU of the others is idle: that side entered a collective on its GPUs
    that the others, waiting on their CPUs, never did."""
    out: list[str] = []
    for side in sides:
        others = [p for s in sides if s is not side for p in s.procs]
        if all(p.gpu is not None and p.gpu.state is GpuState.STUCK for p in side.procs) and all(
            p.gpu is not None and p.gpu.state is GpuState.IDLE for p in others
        ):
            gpus = ", ".join(f"{p.gpu.label} {p.gpu.brief()}" for p in side.procs if p.gpu)
            out.append(
                f"NVML: the GPUs of {side.who} busy-wait in a collective kernel ({gpus}) while "
                f"those of {', '.join(p.label for p in others)} are idle: {side.who} entered a "
                "collective the others never will"
            )
    return out


def collective_mismatch(reading: Reading) -> Cause | None:
    """The cause, where a group's ranks wait in different collectives at both samples: each side
    (its ranks, the collective, the line of the job's code that issued it) and, where a source
    tells them apart, which side entered a collective the others never will. Nothing else names a
    side: a minority is not proof, and with NCCL a CPU frame is the next sync, not the collective."""
    if reading.status is not Status.HUNG:
        return None
    found = collective_mismatches(reading.world)
    if not found:
        return None
    m = found[0]
    told = "; ".join(m.told) if m.told else "nothing tells which side took the wrong path"
    steps: list[str | NextStep] = [
        NextStep(
            "read the code at each side's line: the condition that sent these ranks one way and "
            "the others another (a rank-, role- or data-dependent branch, a count of steps or "
            "buckets that differs between ranks)"
        )
    ]
    evidence = [f"{s.who}: {s.waits} (both samples)" for s in m.sides] + list(m.told)
    finding = Finding(
        "collective-mismatch-cause",
        Severity.CRITICAL,
        f"{m.text[0].upper()}{m.text[1:]}: {told}",
        tuple(evidence),
    )
    about = frozenset(p.pid for side in m.sides for p in side.procs)
    return Cause(finding, tuple(steps), headline=f"{m.text} ({told})", about=about)


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
    causes=(collective_mismatch,),
)
