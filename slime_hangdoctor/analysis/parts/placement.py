"""Ray placement (source ``ray_placement``): placement groups of the running job that wait for
resources the cluster lacks (``/api/v0/placement_groups`` against ``/api/cluster_status``): the
driver waiting in `create_placement_groups` is a start-up hang. A group that lost its node
(RESCHEDULING) is read over both samples, with its scheduling attempt count: one that Ray keeps
retrying while other groups stay PENDING is the reschedule loop of ray#65147 (fix ray PR#65970).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from slime_hangdoctor.analysis.source_analysis import (
    MEDIUM,
    STRONG,
    Reading,
    Reads,
    Source,
    SourceAnalysis,
    Suspect,
    suspect,
)
from slime_hangdoctor.analysis.world import World
from slime_hangdoctor.parsers.ray_state import (
    JOB_RUNNING,
    PG_INFEASIBLE,
    PLACEMENT_GROUP_WAITING,
    RAY_STATE,
    SPEC,
    PlacementDemand,
    PlacementGroupState,
    RayPlacementGroup,
)
from slime_hangdoctor.verdict import Finding, Role, Severity, Stage

RAY_PLACEMENT = Source("ray_placement")  # Ray's placement groups against the cluster's capacity
# a group whose bundles were placed and whose node was then lost; a group not placed yet
RESCHEDULING: Final[PlacementGroupState] = "RESCHEDULING"
PENDING: Final[PlacementGroupState] = "PENDING"
PLACEMENT_GROUPS = "placement_groups"  # the dashboard answer's target (ray_state.STATE_ENDPOINTS)
RESCHEDULE_LOOP_CASE = "ray-project/ray#65147, fixed by ray PR#65970"


@dataclass(frozen=True)
class PlacementWait:
    group: RayPlacementGroup
    demand: dict[str, float]
    strategy: str | None
    short: dict[str, tuple[float, float]]  # resource -> (needed, cluster capacity), if too small
    infeasible: bool  # Ray says so, or the cluster's capacity is below the demand


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _strategy(pg: RayPlacementGroup, demands: tuple[PlacementDemand, ...]) -> str | None:
    want = pg.demand()
    for d in demands:
        if d.total() == want:
            return d.strategy
    return None


def placement_waits(world: World) -> list[PlacementWait]:
    snap = world.snapshot
    jobs = {j.job_id for j in snap.joined(RAY_STATE).jobs if j.status == JOB_RUNNING and j.job_id}
    cluster = snap.joined(RAY_STATE).cluster
    out: list[PlacementWait] = []
    for pg in snap.joined(RAY_STATE).placement_groups:
        if pg.state not in PLACEMENT_GROUP_WAITING:
            continue
        if jobs and pg.creator_job_id not in jobs:
            continue
        demand = pg.demand()
        strategy = _strategy(pg, cluster.pg_demands) if cluster else None
        short: dict[str, tuple[float, float]] = {}
        if cluster is not None:
            for key, need in demand.items():
                cap = cluster.total.get(key, 0.0)
                if strategy == "STRICT_PACK":
                    cap = max((n.get(key, 0.0) for n in cluster.per_node_total), default=cap)
                if need > cap + 1e-9:
                    short[key] = (need, cap)
        infeasible = bool(short) or pg.scheduling_state == PG_INFEASIBLE
        out.append(PlacementWait(pg, demand, strategy, short, infeasible))
    return out


def _placement_text(w: PlacementWait) -> str:
    name = f"placement group {w.group.name!r}" if w.group.name else "a placement group"
    strategy = f" in one {w.strategy} group" if w.strategy else ""
    if w.short:
        parts = [
            f"needs {_fmt(need)} {key}{strategy}, cluster has {_fmt(cap)}"
            for key, (need, cap) in sorted(w.short.items())
        ]
        return f"Ray placement groups: {name} is {w.group.state}: " + "; ".join(parts)
    need = ", ".join(f"{_fmt(v)} {k}" for k, v in sorted(w.demand.items()))
    why = "infeasible (Ray's scheduler)" if w.infeasible else "waiting for free resources"
    return f"Ray placement groups: {name} is {w.group.state}, {why}: needs {need}{strategy}"


def suspects(reads: Reads) -> list[Suspect]:
    world = reads.world
    waits = placement_waits(world)
    if not waits:
        return []
    drivers = world.by_role(Role.DRIVER)
    driver = drivers[0] if drivers else None
    # a group that lost its node was placed once: the job had left start-up, so it names no stage
    return [
        suspect(
            RAY_PLACEMENT,
            Role.DRIVER,
            _placement_text(w) + ": its node was lost, Ray places it again"
            if w.group.state == RESCHEDULING
            else _placement_text(w) + ": the job cannot leave start-up",
            driver,
            weight=STRONG if w.infeasible else MEDIUM,
            stage=None if w.group.state == RESCHEDULING else Stage.STARTUP,
        )
        for w in waits
    ]


def findings(world: World) -> list[Finding]:
    out: list[Finding] = []
    for w in placement_waits(world):
        out.append(
            Finding(
                "ray_placement.infeasible" if w.infeasible else "ray_placement.pending",
                Severity.CRITICAL if w.infeasible else Severity.WARNING,
                _placement_text(w),
                (
                    f"{w.group.placement_group_id[:12]}: {len(w.group.bundles)} bundles, "
                    f"scheduling state {w.group.scheduling_state or '?'}",
                ),
            )
        )
    return out


# --------------------------------------------------------------------------- the reschedule loop


@dataclass(frozen=True)
class Rescheduling:
    """A placement group RESCHEDULING at every sample that read the placement groups (at least
    two), its scheduling attempt count at the first and the last, and the groups PENDING at every
    one of them (of any job: the loop starves the whole cluster's queue)."""

    group: RayPlacementGroup  # as the last sample read it
    attempts: tuple[int | None, int | None]
    pending: tuple[RayPlacementGroup, ...]

    @property
    def retrying(self) -> bool:
        first, last = self.attempts
        return first is not None and last is not None and last > first


def _by_sample(world: World) -> dict[int, dict[str, RayPlacementGroup]]:
    out: dict[int, dict[str, RayPlacementGroup]] = {}
    for obs in world.snapshot.facts(SPEC):
        if obs.fact.target != PLACEMENT_GROUPS:
            continue
        rows = out.setdefault(obs.sample, {})
        for pg in obs.fact.rows:
            if isinstance(pg, RayPlacementGroup):
                rows[pg.placement_group_id] = pg
    return out


def _in_every(
    samples: list[dict[str, RayPlacementGroup]], state: PlacementGroupState
) -> list[tuple[RayPlacementGroup, RayPlacementGroup]]:
    """(first, last) reading of each group in `state` at every sample."""
    first, last = samples[0], samples[-1]
    return [
        (pg, last[gid])
        for gid, pg in first.items()
        if all(s.get(gid) is not None and s[gid].state == state for s in samples)
    ]


def reschedulings(world: World) -> list[Rescheduling]:
    by_sample = _by_sample(world)
    if len(by_sample) < 2:
        return []  # one reading says nothing of "across the window"
    samples = [by_sample[k] for k in sorted(by_sample)]
    pending = tuple(last for _, last in _in_every(samples, PENDING))
    return [
        Rescheduling(last, (first.scheduling_attempt, last.scheduling_attempt), pending)
        for first, last in _in_every(samples, RESCHEDULING)
    ]


def _pg_name(pg: RayPlacementGroup) -> str:
    return f"{pg.name!r}" if pg.name else pg.placement_group_id[:12]


def _rescheduling_finding(r: Rescheduling) -> Finding:
    first, last = r.attempts
    attempts = f"scheduling attempt {first if first is not None else '?'} -> "
    attempts += f"{last if last is not None else '?'}"
    what = f"{attempts}, Ray's scheduling state {r.group.scheduling_state or '?'}"
    starved = ", ".join(_pg_name(p) for p in r.pending)
    evidence = tuple(
        f"{p.placement_group_id[:12]} {_pg_name(p)}: {p.state} at every sample, attempt "
        f"{p.scheduling_attempt if p.scheduling_attempt is not None else '?'}, scheduling state "
        f"{p.scheduling_state or '?'}"
        for p in (r.group, *r.pending)
    )
    head = f"Ray placement groups: {_pg_name(r.group)} lost its node and is RESCHEDULING"
    if r.retrying and r.pending:
        return Finding(
            "ray_placement.reschedule_loop",
            Severity.CRITICAL,
            f"{head} across the window ({what}): Ray retries it ahead of the pending groups, "
            f"which stay PENDING ({starved}): the reschedule loop of {RESCHEDULE_LOOP_CASE}",
            evidence,
        )
    why = (
        "Ray retries it; no other group waits"
        if r.retrying
        else "Ray is not retrying it (the attempt count did not move): it does not hold up the "
        + (
            f"pending groups ({starved}), which wait for their own reasons"
            if r.pending
            else "queue"
        )
    )
    return Finding(
        "ray_placement.rescheduling",
        Severity.WARNING,
        f"{head} across the window ({what}): {why}",
        evidence,
    )


def reschedule_steps(reading: Reading) -> list[str]:
    loops = [r for r in reschedulings(reading.world) if r.retrying and r.pending]
    if not loops:
        return []
    names = ", ".join(_pg_name(r.group) for r in loops)
    return [
        f"Placement group(s) {names} retry after a node loss and starve the pending ones "
        f"({RESCHEDULE_LOOP_CASE}): remove them (`ray.util.remove_placement_group`, or end the "
        "job that owns them) or bring back a node that fits them, and upgrade Ray to a release "
        "with PR#65970",
    ]


def all_findings(reading: Reading) -> list[Finding]:
    return findings(reading.world) + [
        _rescheduling_finding(r) for r in reschedulings(reading.world)
    ]


ANALYSIS = SourceAnalysis(
    name="placement",
    gives=(RAY_PLACEMENT,),
    suspects=suspects,
    findings=all_findings,
    next_steps=reschedule_steps,
)
