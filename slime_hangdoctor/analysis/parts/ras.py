"""NCCL RAS: ranks missing from a communicator, and ranks behind their peers in a collective's
launch count (the ones that never entered the collective the others wait in); collective counts
that rose between the samples are work."""

from __future__ import annotations

from collections.abc import Sequence

from slime_hangdoctor.analysis.readers.nccl_ras import RAS, behind_by_op
from slime_hangdoctor.analysis.readers.proof import Moved, Proof, Signal
from slime_hangdoctor.analysis.source_analysis import (
    STRONG,
    WEAK,
    Evidence,
    Reads,
    SourceAnalysis,
    Suspect,
    suspect,
)
from slime_hangdoctor.analysis.world import World
from slime_hangdoctor.parsers.nccl_ras import (
    RAS_HEALTHY,
    RAS_MISMATCH,
    SPEC,
    RasCommunicator,
    RasRank,
    RasReport,
)
from slime_hangdoctor.verdict import Role

MESSAGES = {
    "ras-communicator-error": "NCCL RAS reports a communicator in error (counts differ or ranks missing)",
    "ras-collective-mismatch": "NCCL RAS: the ranks launched different collectives (a mismatch, not a straggler)",
}


def ras_mismatch(comm: RasCommunicator) -> str | None:
    """Ranks behind in different collectives: each launched some op its peers did not (slime
    PR#862's broadcasts against an all_reduce, slime#674's broadcasts from different roots): not a
    straggler, a mismatch. The counts per op, in words; None when one set of ranks is behind in
    every op that differs (a straggler)."""
    by_op = behind_by_op(comm)
    behind = {frozenset(id(r) for r in ranks) for ranks, _ in by_op.values()}
    if len(behind) < 2:
        return None
    return "; ".join(
        f"{op}: rank(s) {', '.join(str(r.rank) for r in ranks)} behind ({top} launched by "
        "their peers)"
        for op, (ranks, top) in by_op.items()
    )


def ras_behind(comm: RasCommunicator) -> tuple[list[RasRank], str]:
    """Ranks behind their peers in some collective's launch count, and which op shows it; none
    where different ranks are behind in different ops (`ras_mismatch`)."""
    by_op = behind_by_op(comm)
    if ras_mismatch(comm) is not None:
        return [], ""
    for op, (ranks, top) in by_op.items():
        return ranks, f"{op} {top}"
    launched = [r.launched_up_to for r in comm.ranks if r.launched_up_to is not None]
    if launched and RAS_MISMATCH in comm.error_kinds:
        top = max(launched)
        behind = [
            r
            for r in comm.ranks
            if not r.missing and (r.launched_up_to is None or r.launched_up_to < top)
        ]
        return behind, f"operation {top}"
    return [], ""


def suspects(reads: Reads) -> list[Suspect]:
    world = reads.world
    moving_comms = moving_ras_comms(world)
    out: list[Suspect] = []
    seen: set[str] = set()
    latest: dict[str | None, int] = {}
    for obs in world.snapshot.facts(SPEC):
        latest[obs.node_ip] = max(latest.get(obs.node_ip, -1), obs.sample)
    for obs in world.snapshot.facts(SPEC):
        if obs.sample != latest[obs.node_ip]:
            continue
        frozen = frozen_ras_comms(world)
        for comm in obs.fact.communicators:
            if comm.hash in seen or comm.hash in moving_comms:
                continue
            seen.add(comm.hash)
            out.extend(_ras_comm_suspects(world, comm, comm.hash in frozen))
    waiters = _ras_waiters(world, moving_comms)
    root = [s for s in out if s.pid not in waiters or "missing" in s.why]
    return root or out


def _ras_waiters(world: World, moving_comms: frozenset[str]) -> set[int | None]:
    """Pids that launched a collective their peers have not (they wait in it somewhere): in a
    cascade they show up 'behind' in another communicator, but they are victims."""
    out: set[int | None] = set()
    for obs in world.snapshot.facts(SPEC):
        for comm in obs.fact.communicators:
            if comm.hash in moving_comms:
                continue
            behind, _ = ras_behind(comm)
            if behind and mismatch_weight(comm, False) != 0:
                lagging = {id(r) for r in behind}
                out |= {r.pid for r in comm.ranks if id(r) not in lagging and not r.missing}
    return out


def _ras_rank_suspect(
    world: World, comm: RasCommunicator, r: RasRank, why: str, weight: int = STRONG
) -> Suspect:
    proc = world.find(r.pid, r.host)
    gpu = r.nvml_dev if r.nvml_dev is not None else (proc.gpu.index if proc and proc.gpu else None)
    role = proc.role if proc and proc.role else Role.TRAIN_RANK
    evidence: tuple[str, ...] = (
        f"NCCL RAS communicator {comm.hash}: {comm.status or '?'} {comm.errors or '?'}",
        *comm.messages[:6],
    )
    return suspect(
        RAS,
        role,
        why,
        proc,
        pid=r.pid,
        node_ip=r.host or (proc.node_ip if proc else None),
        rank=proc.rank if proc and proc.rank is not None else r.rank,
        gpu=gpu,
        evidence=evidence,
        weight=weight,
    )


def mismatch_weight(comm: RasCommunicator, frozen: bool) -> int:
    """How much a difference in launch counts means. NCCL's own verdict (text form: MISMATCH / OK)
    decides; without it (JSON only) one reading cannot tell a straggler from launch skew in a busy
    job (the busy capture reads 21984 vs 21985), unless the counts stayed frozen across samples."""
    if RAS_MISMATCH in comm.error_kinds:
        return STRONG
    if comm.errors:
        return 0  # NCCL's verdict is another one
    return STRONG if frozen else WEAK


def _ras_comm_suspects(world: World, comm: RasCommunicator, frozen: bool) -> list[Suspect]:
    out: list[Suspect] = []
    for r in comm.ranks:
        if r.missing:
            state = "considered dead" if r.considered_dead else "not responding"
            out.append(
                _ras_rank_suspect(
                    world,
                    comm,
                    r,
                    f"NCCL RAS: rank {r.rank} is missing from the communicator "
                    f"({state}); its peers cannot complete their collectives",
                )
            )
    behind, op = ras_behind(comm)
    weight = mismatch_weight(comm, frozen)
    present = [r for r in comm.ranks if not r.missing]
    if weight and behind and len(behind) < len(present):
        gone = _returned(world, behind)
        if len(gone) == len(behind):
            # every rank behind has returned (its task ended, its worker idle): it will never
            # launch the collective; the ranks that launched it are on a path it did not take
            ahead = [r for r in present if all(r is not b for b in behind)]
            return out + [
                _ras_rank_suspect(
                    world,
                    comm,
                    r,
                    f"NCCL RAS: rank {r.rank} launched {op.split()[0]} up to {op.split()[-1]}, "
                    f"which its peers never will: {'; '.join(gone)}. It is on a path its "
                    "peers did not take",
                    weight,
                )
                for r in ahead
            ]
        for r in behind:
            launched = r.launched_up_to
            detail = (
                f"launched {r.collective_counts.get(op.split()[0], 0)}"
                if r.collective_counts
                else (f"launched up to {launched}" if launched is not None else "launched none")
            )
            out.append(
                _ras_rank_suspect(
                    world,
                    comm,
                    r,
                    f"NCCL RAS: rank {r.rank} is behind its peers ({detail}; peers reached "
                    f"{op}): it never entered the collective they wait in",
                    weight,
                )
            )
    return out


def _returned(world: World, ranks: list[RasRank]) -> list[str]:
    """Why each of `ranks` (RAS ranks) has returned, for those whose process has."""
    out: list[str] = []
    for r in ranks:
        proc = world.find(r.pid, r.host)
        why = world.returned(proc) if proc is not None else None
        if why is not None:
            out.append(why)
    return out


def frozen_ras_comms(world: World) -> set[str]:
    """RAS communicators read in two samples whose collective counts did not change."""
    totals: dict[str, dict[int, int]] = {}
    for obs in world.snapshot.facts(SPEC):
        for c in obs.fact.communicators:
            total = sum(sum(r.collective_counts.values()) for r in c.ranks)
            totals.setdefault(c.hash, {})[obs.sample] = total
    return {h for h, by in totals.items() if len(by) >= 2 and len(set(by.values())) == 1}


def moving_ras_comms(world: World) -> frozenset[str]:
    """RAS communicators whose collective counts rose between samples (a mismatch there is noise)."""
    return world.memo("ras.moving", lambda: frozenset(_moving(world)))


def _moving(world: World) -> set[str]:
    first: dict[str, int] = {}
    moving: set[str] = set()
    for obs in sorted(world.snapshot.facts(SPEC), key=lambda o: o.sample):
        for c in obs.fact.communicators:
            total = sum(sum(r.collective_counts.values()) for r in c.ranks)
            if c.hash in first and total > first[c.hash]:
                moving.add(c.hash)
            first.setdefault(c.hash, total)
    return moving


def evidence(reads: Reads, suspects: Sequence[Suspect]) -> list[Evidence]:
    world = reads.world
    moving = moving_ras_comms(world)
    out: list[Evidence] = []
    seen: set[str] = set()
    frozen = frozen_ras_comms(world)
    for obs in world.snapshot.facts(SPEC):
        for c in obs.fact.communicators:
            if c.hash in seen or c.hash in moving:
                continue
            seen.add(c.hash)
            bad = bool(c.error_kinds) or c.states not in RAS_HEALTHY
            behind, _ = ras_behind(c)
            if not bad and not c.errors and behind and c.hash in frozen:
                bad = True  # JSON form only: counts that differ and stayed frozen
            mismatch = ras_mismatch(c)
            if mismatch is not None and c.hash not in moving:
                out.append(
                    Evidence(
                        RAS,
                        "ras-collective-mismatch",
                        f"NCCL RAS communicator {c.hash}: the ranks launched different "
                        f"collectives ({mismatch}): no rank is simply behind",
                        2,
                    )
                )
            if bad or any(r.missing for r in c.ranks):
                out.append(
                    Evidence(
                        RAS,
                        "ras-communicator-error",
                        f"NCCL RAS communicator {c.hash}: {c.status} {c.errors}"
                        + (f" - {c.messages[0]}" if c.messages else ""),
                        2,
                    )
                )
    return out


def _totals(report: RasReport) -> dict[str, int]:
    return {
        c.hash: sum(sum(r.collective_counts.values()) for r in c.ranks)
        for c in report.communicators
    }


def progress(world: World) -> Moved:
    """Each communicator read at two samples: collectives launched between them, or none."""
    moved: list[Signal] = []
    frozen: list[Signal] = []
    per_node: dict[str | None, list[tuple[int, RasReport]]] = {}
    for obs in world.snapshot.facts(SPEC):
        per_node.setdefault(obs.node_ip, []).append((obs.sample, obs.fact))
    compared = False
    for node, reports in per_node.items():
        if len({s for s, _ in reports}) < 2:
            continue
        reports.sort(key=lambda sr: sr[0])
        first, last = _totals(reports[0][1]), _totals(reports[-1][1])
        for h in sorted(set(first) & set(last)):
            compared = True
            subject = f"NCCL communicator {h}" + (f" @{node}" if node else "")
            if last[h] > first[h]:
                moved.append(Signal(RAS, subject, f"collectives launched +{last[h] - first[h]}"))
            else:
                frozen.append(Signal(RAS, subject, "collective counts unchanged"))
    return Moved(Proof.COLLECTIVES, tuple(moved), frozen=tuple(frozen), compared=compared)


ANALYSIS = SourceAnalysis(
    name="ras",
    gives=(RAS,),
    progress=progress,
    suspects=suspects,
    evidence=evidence,
    messages=MESSAGES,
)
