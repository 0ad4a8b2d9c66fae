"""Suspects from the environment of the slime processes: a caller whose requests to the engines go
to a proxy that no_proxy does not bypass, while no engine has work (analysis/hazards.py)."""

from __future__ import annotations

from slime_hangdoctor.analysis.hazards import proxy_hazards
from slime_hangdoctor.analysis.suspects.suspect import MEDIUM, Suspect, SuspectInputs
from slime_hangdoctor.verdict import Role, Stage


def suspects(reads: SuspectInputs) -> list[Suspect]:
    """A caller whose requests to the engines go to a proxy, while no engine has work: the rollout
    waits on the proxy (the engines never see the requests)."""
    world, engines = reads.world, reads.engines
    known = [e for e in engines if e.in_flight is not None]
    if not known or any((e.in_flight or 0) > 0 or e.moving for e in known):
        return []
    out: list[Suspect] = []
    for h in proxy_hazards(world, engines):
        if h.proc.role not in (Role.ROLLOUT_MANAGER, Role.ROUTER) or not any(
            t.startswith(("engine", "router")) for t in h.through_proxy
        ):
            continue
        out.append(
            Suspect(
                source="environ",
                role=h.proc.role or Role.ROLLOUT_MANAGER,
                why=(
                    f"its requests to the engines go through the proxy {h.proxy} "
                    f"({h.variable}; no_proxy does not cover them) and no engine has a request: "
                    "the proxy holds or drops them (slime#1026: a proxy on the master node)"
                ),
                evidence=(h.describe(),),
                weight=MEDIUM,
                pid=h.proc.pid,
                node_ip=h.proc.node_ip,
                actor_id=h.proc.actor_id,
                stage=Stage.ROLLOUT_DISPATCH,
            )
        )
    return out
