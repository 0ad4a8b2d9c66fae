"""SGLang routers: a router that is gone (the job launched it, its port refuses, no process listens
there, its process is a zombie or was reaped), one that refuses connections or does not answer (no
request reaches an engine), answers 503, or lists no worker while callers hold their requests at
it. The known causes beside them: the router that is gone (what killed it, and that nothing restarts
it) and the router that answers 503. And each URL a router lists that is not one of the job's
engines (`Topology.listed`: anyone who reaches its worker registration may add one), named apart."""

from __future__ import annotations

from slime_hangdoctor.analysis.network import SOCKETS, PeerKind, kept_connections
from slime_hangdoctor.analysis.readers.gone_routers import (
    GoneRouter,
    gone_router,
    gone_routers,
    last_answers,
    url_port,
    zombie_children,
)
from slime_hangdoctor.analysis.readers.sglang_http import SGLANG, read_engines, router_entry
from slime_hangdoctor.analysis.source_analysis import (
    MEDIUM,
    STRONG,
    WEAK,
    Cause,
    Reading,
    Reads,
    SourceAnalysis,
    Suspect,
    cause,
    suspect,
)
from slime_hangdoctor.analysis.world import World
from slime_hangdoctor.parsers.processes import STATUS_ZOMBIE
from slime_hangdoctor.parsers.sglang import (
    HTTP_ANSWERS,
    HttpPeer,
    RouterWorkers,
    SglangMetrics,
    counter_rises,
)
from slime_hangdoctor.verdict import Finding, Role, Severity, Stage


def suspects(reads: Reads) -> list[Suspect]:
    world = reads.world
    last, by_url = last_answers(world)
    out: list[Suspect] = []
    for url, answers in by_url.items():
        refused = all(a.status is None for a in answers)
        if not refused and not any(a.status == 503 for a in answers):
            if (empty := _empty_with_requests(reads, url, last)) is not None:
                out.append(empty)
            continue
        proc = next((p for p in world.by_role(Role.ROUTER) if p.engine_url == url), None)
        if refused and (gone := gone_router(world, url, answers, proc)) is not None:
            out.append(_gone_suspect(world, gone))
            continue
        why = (
            f"router {url} does not answer ({answers[0].error or 'no answer'}): no request "
            "reaches an engine"
            if refused
            else f"router {url} answers 503 (no available workers)"
        )
        out.append(
            suspect(
                SGLANG,
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


def _empty_with_requests(reads: Reads, url: str, sample: int) -> Suspect | None:
    """The router's `/workers` lists no worker at the last sample while the job's engines are
    there and a RolloutManager holds connections to the router across both samples: every request
    it gets is answered 503 (`no_available_workers`, sgl-router 0.3.2) and retried, or waits; the
    router holds the rollout (a worker removed, or never registered)."""
    world = reads.world
    listed = [
        o.parsed
        for o in world.snapshot.joined(HTTP_ANSWERS)
        if o.kind is HttpPeer.ROUTER and o.sample == sample and o.answer.url == url
        if isinstance(o.parsed, RouterWorkers)
    ]
    if not listed or any(w.urls for w in listed) or not read_engines(reads.world):
        return None
    holders: list[str] = []
    for rm in world.by_role(Role.ROLLOUT_MANAGER):
        kept = kept_connections(world, read_engines(reads.world), rm)
        held = sum(n for ep, n in kept.to(PeerKind.ROUTER)) if kept is not None else 0
        if held:
            holders.append(f"{rm.label} (pid {rm.pid}) holds {held} connection(s) to it")
    if not holders:
        return None
    proc = next((p for p in world.by_role(Role.ROUTER) if p.engine_url == url), None)
    engines = ", ".join(e.url for e in read_engines(reads.world)[:3])
    return suspect(
        SOCKETS,
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


def _gone_suspect(world: World, gone: GoneRouter) -> Suspect:
    owner = gone.owner
    proc = gone.proc
    if proc is not None:
        info = proc.infos[-1][1] if proc.infos else None
        if info is not None and info.status == STATUS_ZOMBIE:
            parent = f"pid {info.ppid}" if info.ppid is not None else "its parent"
            if owner is not None and owner.pid == info.ppid:
                parent = f"the {owner.label} (pid {owner.pid})"
            what = (
                f"its process (pid {proc.pid}) has died (killed or crashed) and is a zombie "
                f"(state Z) that {parent} has not reaped"
            )
        else:
            what = f"its process (pid {proc.pid}) seen earlier in this run has exited"
    elif owner is not None and (zombies := zombie_children(world, owner)):
        what = (
            f"its process has died: the {owner.label} (pid {owner.pid}) that launched it has "
            f"{len(zombies)} zombie children ({', '.join(map(str, zombies[:4]))}) and which one "
            f"was the router cannot be told; pid {owner.pid} is that {owner.label}"
        )
    elif owner is not None:
        what = (
            "its process has exited and been reaped (no process of the job is left of it); "
            f"pid {owner.pid} is the {owner.label} that launched it (its parent, which owned it)"
        )
    else:
        what = "no process of the job is left of it"
    port = url_port(gone.url)
    waiting = ", ".join(f"{p.label} (pid {p.pid})" for p in gone.waiting[:2])
    why = (
        f"router {gone.url} is gone: {what}. Its port refuses connections and no process of the "
        f"job listens on {port}, while {waiting} runs the rollout: no request reaches an engine"
    )
    evidence = (
        f"[sglang] {gone.url} named {gone.known.origin}"[:400],
        *(f"[sglang] GET {a.url}{a.path}: {a.error or 'no answer'}" for a in gone.answers[:2]),
        *(
            (
                f"[processes] pid {proc.pid}: {proc.infos[-1][1].status}, ppid {proc.infos[-1][1].ppid}",
            )
            if proc is not None and proc.infos
            else ()
        ),
        f"[processes] no live process of the job listens on port {port}",
    )
    blamed = gone.blamed
    return suspect(
        SGLANG,
        Role.ROUTER,
        why,
        blamed,
        engine_url=gone.url,
        node_ip=(blamed.node_ip if blamed is not None else None),
        rank=None,
        weight=STRONG,
        stage=Stage.ROLLOUT_DISPATCH,
        evidence=evidence,
    )


def _router_no_workers(r: Reading) -> Cause | None:
    """A router whose `/workers` lists no worker in every sample that read it: sgl-router 0.3.2
    then answers every `/generate` 503 `no_available_workers` (and `/readiness` 503): recorded
    from the real wheel with no worker, tests/fixtures/real/router-no-workers/answers.json. The
    doctor never sends a `/generate` itself: the empty list is what it reads."""
    lists: dict[str, list[RouterWorkers]] = {}
    for o in r.world.snapshot.joined(HTTP_ANSWERS):
        if o.kind is HttpPeer.ROUTER and isinstance(o.parsed, RouterWorkers):
            lists.setdefault(o.answer.url.rstrip("/"), []).append(o.parsed)
    empty = sorted(url for url, seen in lists.items() if seen and not any(w.urls for w in seen))
    if not empty:
        return None
    return cause(
        "router-no-workers",
        Severity.WARNING,
        "The router lists no worker: every /generate sent through it is answered 503 "
        "no_available_workers and never reaches an engine (THUDM/slime#1026, #683, #1391: a dead "
        "or OOM engine, a proxy on the master, a wrong host IP - set SLIME_HOST_IP; or engines "
        "that never registered).",
        [f"GET {url}/workers: 200, no worker, in every sample" for url in empty[:3]],
        [
            f"curl -s -m 5 {empty[0]}/workers  and check that every engine URL is reachable "
            "from the router's node"
        ],
    )


def _router_gone(r: Reading) -> Cause | None:
    """The job's router is gone (`routers.gone_router`): what killed it, and that nothing
    restarts it."""
    gone = gone_routers(r.world)
    if not gone:
        return None
    first = gone[0]
    blamed = first.blamed
    node = blamed.node_ip if blamed is not None else None
    steps = [
        f"dmesg -T | grep -iE 'killed process|out of memory'{f'  on {node}' if node else ''}  "
        "(the OOM killer names the process it killed: "
        + (f"pid {first.proc.pid}" if first.proc is not None else "the router's pid")
        + ")",
    ]
    if first.owner is not None and first.owner.actor_id:
        steps.append(
            f"ray logs actor --id {first.owner.actor_id}  (slime forks its router from the "
            "RolloutManager: the router's own output, a panic or its last lines, is in that "
            "actor's log)"
        )
    steps.append(
        "restart the job: slime starts its router only in the RolloutManager's constructor "
        "(`_start_router`) and nothing starts it again; give the router more memory or run it "
        "yourself (--sglang-router-ip/--sglang-router-port) if it was OOM-killed"
    )
    ev = [
        f"{g.url}: named {g.known.origin}; "
        + ", ".join(f"GET {a.path}: {a.error or 'no answer'}" for a in g.answers[:2])
        for g in gone
    ]
    return cause(
        "router-gone",
        Severity.WARNING,
        "The job's router is gone: its port refuses connections and no process of the job "
        "listens there, while the rollout sends its requests to it (slime retries "
        "/generate on a refused connection; engines stay idle). sgl-router is a plain child "
        "process of the RolloutManager: killed (the OOM killer, a signal) or crashed, it is "
        "never restarted.",
        ev,
        steps,
    )


def listed_findings(world: World) -> list[Finding]:
    """Each URL a router lists that is not one of the job's engines (`Topology.listed`: no process
    of the job serves it, the job's arguments and the user do not name it). Anyone who reaches
    the router's worker registration can add one: it was probed without the API key, and nothing
    it answers weighs on the verdict; what it answered is told, and the router's own count of
    requests in flight to it (the job's requests sent there are lost to the job)."""
    out: list[Finding] = []
    for engine in world.topology.listed:
        url = engine.url.rstrip("/")
        answers = [  # ENGINE: a bundle written before the collector marked them
            o
            for o in world.snapshot.joined(HTTP_ANSWERS)
            if o.kind in (HttpPeer.LISTED, HttpPeer.ENGINE) and o.answer.url.rstrip("/") == url
        ]
        evidence: list[str] = []
        ok = sorted({o.answer.path for o in answers if o.answer.status == 200})
        if ok:
            evidence.append(f"it answered {', '.join(ok)}")
        not_ok = {
            f"GET {o.answer.path}: {o.answer.error or f'HTTP {o.answer.status}'}"
            for o in answers
            if o.answer.status != 200 and o.answer.path not in ok
        }
        evidence.extend(sorted(not_ok)[:3])
        metrics = {o.sample: o.parsed for o in answers if isinstance(o.parsed, SglangMetrics)}
        if len(metrics) >= 2:
            rises = counter_rises(metrics[min(metrics)], metrics[max(metrics)])
            if rises:
                evidence.append(f"its counters rose ({', '.join(rises)}): not the job's progress")
        entry = router_entry(world, url)
        if entry is not None and entry.load:
            evidence.append(f"the router counts {entry.load} requests in flight to it")
        out.append(
            Finding(
                "router-lists-unknown-engine",
                Severity.WARNING,
                f"the router lists {url}, which is not one of the job's engines (no process of "
                "the job serves it, and neither the job's arguments nor --sglang-url name it): "
                "probed without the API key, left out of the verdict",
                tuple(evidence[:5]),
            )
        )
    return out


ANALYSIS = SourceAnalysis(
    name="routers",
    gives=(SGLANG, SOCKETS),
    suspects=suspects,
    causes=(_router_no_workers, _router_gone),
    findings=lambda r: listed_findings(r.world),
    idle_findings=listed_findings,
)
