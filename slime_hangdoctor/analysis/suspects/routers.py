"""SGLang routers: a router that refuses connections (no request reaches an engine) or answers 503."""

from __future__ import annotations

from slime_hangdoctor.analysis.suspects.suspect import STRONG, WEAK, Reads, Suspect, suspect
from slime_hangdoctor.facts import HttpAnswer
from slime_hangdoctor.verdict import Role, Stage


def suspects(reads: Reads) -> list[Suspect]:
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
