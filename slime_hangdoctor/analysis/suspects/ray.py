"""Ray state: slime actors of the running job that Ray reports DEAD."""

from __future__ import annotations

from slime_hangdoctor.analysis.suspects.suspect import STRONG, Reads, Suspect
from slime_hangdoctor.analysis.world import World
from slime_hangdoctor.verdict import Role


def _running_job_ids(world: World) -> set[str]:
    return {j.job_id for j in world.snapshot.jobs if j.status == "RUNNING" and j.job_id}


_ACTOR_ROLES = {
    "MegatronTrainRayActor": Role.TRAIN_RANK,
    "RolloutManager": Role.ROLLOUT_MANAGER,
    "SGLangEngine": Role.SGLANG_ENGINE,
}


def suspects(reads: Reads) -> list[Suspect]:
    world = reads.world
    jobs = _running_job_ids(world)
    out: list[Suspect] = []
    for a in world.snapshot.actors:
        role = _ACTOR_ROLES.get(a.class_name)
        if role is None or a.state != "DEAD" or not jobs or a.job_id not in jobs:
            continue
        out.append(
            Suspect(
                "ray",
                role,
                f"Ray: {a.class_name} actor {a.actor_id[:12]} of the running job is DEAD",
                weight=STRONG,
                pid=a.pid,
                node_ip=a.node_ip,
                actor_id=a.actor_id,
            )
        )
    return out
