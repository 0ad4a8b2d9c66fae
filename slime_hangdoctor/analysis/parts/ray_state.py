"""Ray state: slime actors of the running job that Ray reports DEAD, and why each died."""

from __future__ import annotations

from slime_hangdoctor.analysis.source_analysis import STRONG, Reads, Source, SourceAnalysis, Suspect
from slime_hangdoctor.analysis.world import World
from slime_hangdoctor.parsers.ray_state import ACTOR_DEAD, JOB_RUNNING, RAY_STATE, RayActor
from slime_hangdoctor.topology import CLASS_ROLES
from slime_hangdoctor.verdict import Finding, Severity

RAY = Source("ray")  # Ray's state API (actors, jobs)


def _running_job_ids(world: World) -> set[str]:
    return {
        j.job_id
        for j in world.snapshot.joined(RAY_STATE).jobs
        if j.status == JOB_RUNNING and j.job_id
    }


def suspects(reads: Reads) -> list[Suspect]:
    world = reads.world
    jobs = _running_job_ids(world)
    out: list[Suspect] = []
    for a in world.snapshot.joined(RAY_STATE).actors:
        role = CLASS_ROLES.get(a.class_name)
        if role is None or a.state != ACTOR_DEAD or not jobs or a.job_id not in jobs:
            continue
        out.append(
            Suspect(
                RAY,
                role,
                f"Ray: {a.class_name} actor {a.actor_id[:12]} of the running job is DEAD"
                + _death_cause(a),
                weight=STRONG,
                pid=a.pid,
                node_ip=a.node_ip,
                actor_id=a.actor_id,
            )
        )
    return out


def _death_cause(actor: RayActor) -> str:
    """Ray's death cause of an actor, short (`` (WORKER_DIED; SYSTEM_ERROR; ...)``)."""
    d = actor.death
    bits = [x for x in (d.reason, d.exit_type, d.exit_detail) if x] if d else []
    return f" ({'; '.join(bits)})" if bits else ""


def findings(world: World) -> list[Finding]:
    """Why each slime actor of a running job died, as Ray recorded it."""
    jobs = {
        j.job_id
        for j in world.snapshot.joined(RAY_STATE).jobs
        if j.status == JOB_RUNNING and j.job_id
    }
    out: list[Finding] = []
    for a in world.snapshot.joined(RAY_STATE).actors:
        if a.state != ACTOR_DEAD or a.death is None or a.class_name not in CLASS_ROLES:
            continue
        if jobs and a.job_id not in jobs:
            continue
        d = a.death
        detail = ", ".join(
            x
            for x in (
                d.reason,
                f"exit type {d.exit_type}" if d.exit_type else None,
                d.exit_detail,
                "never started" if d.never_started else None,
            )
            if x
        )
        out.append(
            Finding(
                "ray_actor.death",
                Severity.CRITICAL,
                f"Ray actors: {a.class_name} {a.name or a.actor_id[:8]} (pid {a.pid}) died: "
                f"{detail or d.kind}",
                ((d.message or "")[:300],) if d.message else (),
            )
        )
    return out


ANALYSIS = SourceAnalysis(
    name="ray_state",
    gives=(RAY,),
    suspects=suspects,
    findings=lambda r: findings(r.world),
)
