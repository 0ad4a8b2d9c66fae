"""SGLang routers: a router that refuses connections (no request reaches an engine), answers 503, or
lists no worker while callers hold their requests at it."""

from __future__ import annotations

from slime_hangdoctor.analysis.network import kept_connections
from slime_hangdoctor.analysis.suspects.suspect import (
    MEDIUM,
    STRONG,
    WEAK,
    Suspect,
    SuspectInputs,
    suspect,
)
from slime_hangdoctor.facts import HttpAnswer, RouterWorkers
from slime_hangdoctor.verdict import Role, Stage


def suspects(reads: SuspectInputs) -> list[Suspect]:
    world = reads.world
    by_url: dict[str, list[HttpAnswer]] = {}
    last = max((o.sample for o in world.snapshot.http if o.kind == "router"), default=0)
    for o in world.snapshot.http:
        if o.kind == "router" and o.sample == last:
            by_url.setdefault(o.answer.url, []).append(o.answer)
    out: list[Suspect] = []
    for url, answers in by_url.items():
        refused = all(a.status is None for a in answers)
        if not refused and not any(a.status == 503 for a in answers):
            if (empty := _empty_with_requests(reads, url, last)) is not None:
                out.append(empty)
            continue
        proc = next((p for p in world.by_role(Role.ROUTER) if p.engine_url == url), None)
        why = (
            f"router {url} does not answer ({answers[0].error or 'no answer'}): no request "
            "reaches an engine"
            if refused
            else f"router {url} answers 503 (no available workers)"
        )
        out.append(
            suspect(
                "sglang",
                Role.ROUTER,
                why,
                proc,
                engine_url=url,
                weight=STRONG if refused else WEAK,
                stage=Stage.ROLLOUT_DISPATCH,
                evidence=tuple(f"GET {a.url}{a.path}: {a.status or a.error}" for a in answers[:3]),
            )
        )
    return out


def _empty_with_requests(reads: SuspectInputs, url: str, sample: int) -> Suspect | None:
    """The router's `/workers` lists no worker at the last sample while the job's engines are
    there and a RolloutManager holds connections to the router across both samples: every request
    it gets is answered 503 (`no_available_workers`, sgl-router 0.3.2) and retried, or waits; the
    router holds the rollout (a worker removed, or never registered)."""
    world = reads.world
    listed = [
        o.parsed
        for o in world.snapshot.http
        if o.kind == "router" and o.sample == sample and o.answer.url == url
        if isinstance(o.parsed, RouterWorkers)
    ]
    if not listed or any(w.urls for w in listed) or not reads.engines:
        return None
    holders: list[str] = []
    for rm in world.by_role(Role.ROLLOUT_MANAGER):
        kept = kept_connections(world, reads.engines, rm)
        held = sum(n for ep, n in kept.to("router")) if kept is not None else 0
        if held:
            holders.append(f"{rm.label} (pid {rm.pid}) holds {held} connection(s) to it")
    if not holders:
        return None
    proc = next((p for p in world.by_role(Role.ROUTER) if p.engine_url == url), None)
    engines = ", ".join(e.url for e in reads.engines[:3])
    return suspect(
        "sockets",
        Role.ROUTER,
        f"router {url} lists no worker (GET /workers) while the job's engines ({engines}) are up "
        f"and the rollout's requests are held at it: {'; '.join(holders)} across both samples. "
        "Every request it gets is answered 503 (no available workers) and retried",
        proc,
        engine_url=url,
        weight=MEDIUM,
        stage=Stage.ROLLOUT_DISPATCH,
        evidence=(
            f"[sglang] GET {url}/workers: 200, no worker",
            *(f"[sockets] {h}" for h in holders),
        ),
    )
