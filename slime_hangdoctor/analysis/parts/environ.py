"""The environment of the slime processes (allow-listed variables of the process table).

- A caller whose requests to the engines go to a proxy that no_proxy does not bypass, while no
  engine has work, is a suspect (analysis/readers/proxies.py reads the proxies); a proxy in front of the
  job's own endpoints is a finding whatever the verdict.
- NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME differing across ranks (or set on some only): ranks bind
  their bootstrap sockets to different networks and the group never forms (OpenRLHF#865).
"""

from __future__ import annotations

from slime_hangdoctor.analysis.readers.proxies import ENVIRON, env_of, proxy_hazards
from slime_hangdoctor.analysis.readers.sglang_http import EngineRead, read_engines
from slime_hangdoctor.analysis.source_analysis import (
    MEDIUM,
    Reading,
    Reads,
    SourceAnalysis,
    Suspect,
)
from slime_hangdoctor.analysis.world import World
from slime_hangdoctor.verdict import Finding, Role, Severity, Stage

IFNAME_VARS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME")


def suspects(reads: Reads) -> list[Suspect]:
    """A caller whose requests to the engines go to a proxy, while no engine has work: the rollout
    waits on the proxy (the engines never see the requests)."""
    world, engines = reads.world, read_engines(reads.world)
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
                source=ENVIRON,
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


def _ifname_mismatches(world: World) -> list[str]:
    ranks = [p for p in world.train_ranks() if p.infos]
    lines: list[str] = []
    for var in IFNAME_VARS:
        values: dict[str, list[str]] = {}
        for p in ranks:
            values.setdefault(env_of(p).get(var, "(unset)"), []).append(p.label)
        if len(values) > 1 and set(values) != {"(unset)"}:
            lines.append(
                f"{var} differs across ranks: "
                + "; ".join(f"{v} on {', '.join(sorted(who)[:4])}" for v, who in values.items())
            )
    return lines


def environ_findings(world: World, engines: tuple[EngineRead, ...]) -> list[Finding]:
    out: list[Finding] = []
    proxies = proxy_hazards(world, engines)
    if proxies:
        out.append(
            Finding(
                "proxy-on-job-endpoints",
                Severity.WARNING,
                "Slime processes send requests for the job's own endpoints to a proxy "
                "(their environment has a proxy and no_proxy does not cover these hosts)",
                tuple(h.describe() for h in proxies[:6]),
            )
        )
    if lines := _ifname_mismatches(world):
        out.append(
            Finding(
                "socket-ifname-differs",
                Severity.WARNING,
                "Ranks bind their NCCL / Gloo sockets to different network interfaces",
                tuple(lines),
            )
        )
    return out


def next_steps(reading: Reading) -> list[str]:
    steps: list[str] = []
    if proxy_hazards(reading.world, read_engines(reading.world)):
        steps.append(
            "Unset http_proxy/https_proxy/all_proxy for the job, or add every engine, router and "
            "head host to no_proxy (e.g. export no_proxy=localhost,127.0.0.1,<node IPs>) before "
            "`ray start` and the job submission (slime#1026)"
        )
    if _ifname_mismatches(reading.world):
        steps.append(
            "Set NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME to the same interface on every node (in "
            "the job's runtime_env env_vars), then restart the job"
        )
    return steps


ANALYSIS = SourceAnalysis(
    name="environ",
    gives=(ENVIRON,),
    suspects=suspects,
    findings=lambda r: environ_findings(r.world, read_engines(r.world)),
    next_steps=next_steps,
)
