"""Ray placement (source ``ray_placement``): placement groups of the running job that wait for
resources the cluster lacks (``/api/v0/placement_groups`` against ``/api/cluster_status``): the
driver waiting in `create_placement_groups` is a start-up hang.
"""

from __future__ import annotations

from dataclasses import dataclass

from slime_hangdoctor.analysis.source_analysis import (
    MEDIUM,
    STRONG,
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
    PlacementDemand,
    RayPlacementGroup,
)
from slime_hangdoctor.verdict import Finding, Role, Severity, Stage

RAY_PLACEMENT = Source("ray_placement")  # Ray's placement groups against the cluster's capacity


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
    return [
        suspect(
            RAY_PLACEMENT,
            Role.DRIVER,
            _placement_text(w) + ": the job cannot leave start-up",
            driver,
            weight=STRONG if w.infeasible else MEDIUM,
            stage=Stage.STARTUP,
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


ANALYSIS = SourceAnalysis(
    name="placement",
    gives=(RAY_PLACEMENT,),
    suspects=suspects,
    findings=lambda r: findings(r.world),
)
