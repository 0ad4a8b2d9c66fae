"""The RolloutManager's event loop: reward or other synchronous code hogging it, or requests that
never reach an engine (every engine idle while the rollout coroutines wait on I/O); the known causes
of requests held outside the job's engines (a proxy, a service outside the job)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from slime_hangdoctor.analysis.network import SOCKETS
from slime_hangdoctor.analysis.parts.rollout.lost_requests import (
    Holder,
    LostRequests,
    where_requests_are,
)
from slime_hangdoctor.analysis.readers.pyspy import ProcessRead, ThreadRead
from slime_hangdoctor.analysis.readers.sglang_http import (
    HELD_CAUSES,
    HOLDING_STATES,
    SGLANG,
    EngineRead,
    EngineState,
    read_engines,
)
from slime_hangdoctor.analysis.signatures import Block
from slime_hangdoctor.analysis.source_analysis import (
    MEDIUM,
    WEAK,
    Cause,
    Evidence,
    Reading,
    Reads,
    Source,
    SourceAnalysis,
    Suspect,
    cause,
    suspect,
)
from slime_hangdoctor.analysis.world import Proc, World
from slime_hangdoctor.verdict import Role, Severity, Stage, Status

ROLLOUT = Source("rollout")  # the RolloutManager's event loop (read from its stacks)

MESSAGES = {
    "rollout-loop-blocked": "The rollout event loop is blocked",
}


def suspects(reads: Reads) -> list[Suspect]:
    world, engines = reads.world, read_engines(reads.world)
    out: list[Suspect] = []
    for rm in world.by_role(Role.ROLLOUT_MANAGER):
        read = rm.latest
        loop = read.loop if read else None
        if read is None or loop is None or rm.is_child:
            continue
        if loop.block is not Block.CPU and (pool := _reward_pool(world, rm)):
            out.append(_awaits_its_pool(rm, pool))
            continue
        if loop.block is Block.CPU:
            both = all(
                r.loop is not None and r.loop.block is Block.CPU and r.loop.stage is loop.stage
                for r in rm.reads
            )
            stage = loop.stage if loop.stage is Stage.REWARD else Stage.ROLLOUT_DISPATCH
            what = "the reward function" if stage is Stage.REWARD else "synchronous code"
            out.append(
                suspect(
                    ROLLOUT,
                    Role.ROLLOUT_MANAGER,
                    f"the rollout event loop is CPU-bound in {what} ({loop.describe()}): while "
                    "it runs, no rollout coroutine can send or receive a request"
                    + (" (in every sample)" if both and len(rm.reads) > 1 else ""),
                    rm,
                    stage=stage,
                    weight=MEDIUM if both else WEAK,
                    evidence=tuple(f.where for f in loop.frames[:8]),
                )
            )
        elif loop.block not in (Block.EVENT_LOOP, Block.UNKNOWN):
            out.append(
                suspect(
                    ROLLOUT,
                    Role.ROLLOUT_MANAGER,
                    f"the rollout event loop is blocked in a synchronous call "
                    f"({loop.describe()}): every rollout coroutine waits behind it",
                    rm,
                    stage=loop.stage or read.stage or Stage.ROLLOUT_DISPATCH,
                    weight=MEDIUM,
                    evidence=tuple(f.where for f in loop.frames[:8]),
                )
            )
        elif read.stage in (Stage.ROLLOUT_DISPATCH, Stage.EVAL):
            out.extend(_requests_lost(world, rm, read, engines))
    return out


@dataclass(frozen=True)
class _PoolWorker:
    """A worker of a pool the RolloutManager grades rewards in: a thread of its own process, or a
    process it forked; `thread` is the thread that runs the reward code at the last sample."""

    label: str  # "thread 'reward-verifier_0'" or "rollout manager child (pid 812)"
    thread: ThreadRead


def _reward_pool(world: World, rm: Proc) -> list[_PoolWorker]:
    """The RolloutManager's pool workers that run reward code at every sample read (a grade that
    never returns: verl#5839, AReaL#1426): a thread of it other than its event loop, or a child
    process it forked (a process pool's worker keeps its title: topology's `child` members)."""
    out: list[_PoolWorker] = []
    for t in _in_reward_every_sample(rm.reads, own_loop=True):
        out.append(_PoolWorker(f"thread {t.name or t.thread_id!r} of {rm.label}", t))
    for child in world.children_of(rm):
        for t in _in_reward_every_sample(child.reads, own_loop=False):
            out.append(_PoolWorker(f"{child.label}, a process it forked", t))
    return out


def _in_reward_every_sample(reads: tuple[ProcessRead, ...], own_loop: bool) -> list[ThreadRead]:
    """Threads (by id) that run reward code in every read; the event loop's own thread is left to
    the loop rules above."""
    if not reads:
        return []
    found: list[ThreadRead] = []
    for t in reads[-1].threads:
        if own_loop and (t.is_loop_thread or t.main):
            continue
        same = [x for r in reads for x in r.threads if x.thread_id == t.thread_id]
        if len(same) == len(reads) and all(x.stage is Stage.REWARD for x in same):
            found.append(t)
    return found


def _awaits_its_pool(rm: Proc, pool: list[_PoolWorker]) -> Suspect:
    first = pool[0]
    where = first.thread.describe()
    return suspect(
        ROLLOUT,
        Role.ROLLOUT_MANAGER,
        f"the rollout awaits its rewards from a pool: {first.label} runs the reward function "
        f"({where}) in every sample and never returns its grade (a verifier with no timeout); "
        "the rollout event loop waits on it"
        + (f" ({len(pool)} pool workers in reward code)" if len(pool) > 1 else ""),
        rm,
        stage=Stage.REWARD,
        weight=MEDIUM if len(rm.reads) > 1 else WEAK,
        evidence=tuple(f"{w.label}: {w.thread.describe()}" for w in pool[:4])
        + tuple(f.where for f in first.thread.frames[:6]),
    )


def _paused_engine(e: EngineRead, read: ProcessRead) -> Suspect:
    """An engine that holds the requests before its scheduler while the rollout waits on I/O:
    paused (a /pause_generation without its /continue_generation, field-hangs.md #7) where the
    pause evidence shows it, else held for a reason the evidence does not name."""
    proc = e.server or e.actor or (e.schedulers[0] if e.schedulers else None)
    if e.state is EngineState.PAUSED:
        why = (
            f"engine {e.url} is paused while the rollout waits on I/O: it holds the requests (a "
            "pause_generation that no continue_generation followed)"
        )
    else:
        why = (
            f"engine {e.url} holds the rollout's requests between its HTTP layer and its "
            f"scheduler while the rollout waits on I/O: not paused by the evidence; {HELD_CAUSES}"
        )
    # the engine as parts/engines' engine_suspect names it (EngineRead.as_suspect), built here: a
    # part imports no other part (docs/architecture.md), and `by` names this part's function.
    # It stands in: the engine holds the requests, not one process of it
    return suspect(
        SGLANG,
        Role.SGLANG_ENGINE,
        why,
        proc,
        weight=MEDIUM,
        stage=read.stage,
        stands_in=True,
        **e.as_suspect(proc),
    )


def _requests_lost(
    world: World, rm: Proc, read: ProcessRead, engines: tuple[EngineRead, ...]
) -> list[Suspect]:
    """The loop waits on I/O and no engine shows a request. That alone blames nobody: the
    RolloutManager is named only when its task history and its connections point at it
    (parts/rollout/lost_requests.py); a paused or dead engine, an engine its callers hold connections to, a
    router or a proxy that holds the requests is named by its own finder and finding."""
    paused = [e for e in engines if e.state in HOLDING_STATES]
    if paused:  # paused in place it may still show requests: it holds them either way
        return [_paused_engine(e, read) for e in paused]
    known = [e for e in engines if e.in_flight is not None]
    if not known or any((e.in_flight or 0) > 0 or e.moving for e in known):
        return []
    where = where_requests_are(world, engines, rm)
    if where.holder is Holder.EXTERNAL and where.service is not None:
        svc = where.service
        return [
            suspect(
                SOCKETS,
                Role.ROLLOUT_MANAGER,
                f"the rollout waits on the {svc.kind.value} {svc.url}, a service outside the job "
                f"({svc.named_by}): the RolloutManager holds its connections to it across both "
                "samples while every engine is idle, so the requests are there "
                f"[evidence: {', '.join(sorted(where.sources))}]",
                rm,
                stage=svc.stage,
                weight=MEDIUM,
                evidence=where.why,
            )
        ]
    if where.holder is not Holder.ROLLOUT_MANAGER:
        return []
    return [
        suspect(
            ROLLOUT,
            Role.ROLLOUT_MANAGER,
            "rollout coroutines wait on I/O (event loop idle in select), no engine has a request "
            "and none holds one, and the RolloutManager's own evidence points at it: its rollout "
            "method has run far longer than before while it holds no connection to any engine, "
            "router or proxy, so the requests never left it (a coroutine awaiting something "
            "nobody completes: a leaked concurrency slot, a future nobody sets, a remote service) "
            f"[evidence: {', '.join(sorted(where.sources))}]",
            rm,
            stage=read.stage,
            weight=WEAK,
            evidence=where.why,
        )
    ]


def evidence(reads: Reads, suspects: Sequence[Suspect]) -> list[Evidence]:
    """The loop blocked (a MEDIUM rollout suspect) is itself a sign of a hang."""
    return [
        Evidence(ROLLOUT, "rollout-loop-blocked", s.why, 1)
        for s in suspects
        if s.source == ROLLOUT and s.weight >= MEDIUM
    ]


def _idle_rollout_held_by(
    r: Reading, holder: Holder
) -> tuple[LostRequests, list[EngineRead]] | None:
    """The first RolloutManager whose rollout loop waits on I/O while every engine that reports
    its load holds no request and does not move, when `holder` holds its requests
    (`lost_requests.where_requests_are`), with those engines."""
    for rm in r.world.by_role(Role.ROLLOUT_MANAGER):
        read = rm.latest
        if read is None or read.loop is None or read.loop.block is not Block.EVENT_LOOP:
            continue
        known = [e for e in read_engines(r.world) if e.in_flight is not None]
        if not known or any((e.in_flight or 0) > 0 or e.moving for e in known):
            return None
        where = where_requests_are(r.world, read_engines(r.world), rm)
        if where.holder is holder:
            return where, known
    return None


def _requests_at_proxy(r: Reading) -> Cause | None:
    """The rollout waits on I/O, no engine has a request, and the RolloutManager's requests go to
    an HTTP proxy (slime#1026 maintainer: "a proxy on the master node"): the proxy holds them.
    Its own cause, beside the hazard: what to check and what to change."""
    if r.status is not Status.HUNG or r.stage not in (Stage.ROLLOUT_DISPATCH, Stage.EVAL):
        return None
    found = _idle_rollout_held_by(r, Holder.PROXY)
    if found is None:
        return None
    where, known = found
    url = known[0].url
    return cause(
        "requests-at-proxy",
        Severity.CRITICAL,
        f"The rollout's requests go to an HTTP proxy ({where.proxy}), not to the engines: "
        "every engine answers and holds no request while the RolloutManager waits on the "
        "proxy (THUDM/slime#1026: a proxy on the master node)",
        [
            *where.why,
            *(f"[sglang] engine {e.url}: 0 running, 0 queued" for e in known[:3]),
        ],
        [
            f"On the RolloutManager's node: `curl -s -m 5 {url}/health` (through the proxy, "
            f"as the rollout's client does) against `curl -s -m 5 --noproxy '*' {url}/health`"
            " (direct): the first hangs or fails where the proxy cannot reach the engines",
            "slime's httpx client (trust_env) and the router honour http_proxy/https_proxy/"
            "all_proxy and no_proxy: no_proxy takes host names, exact IPs and .domain "
            "suffixes, not CIDR ranges; list every engine and router host",
        ],
    )


def _requests_at_external_service(r: Reading) -> Cause | None:
    """The rollout waits on a service outside the job that the job's configuration names (a remote
    reward model or judge, a tool server, an external engine): it holds the requests."""
    if r.status is not Status.HUNG:
        return None
    found = _idle_rollout_held_by(r, Holder.EXTERNAL)
    svc = found[0].service if found is not None else None
    if found is None or svc is None:
        return None
    where = found[0]
    return cause(
        "requests-at-external-service",
        Severity.CRITICAL,
        f"The rollout waits on the {svc.kind.value} {svc.url}, a service outside the job "
        f"({svc.named_by}): the RolloutManager holds its requests there while every engine "
        "is idle",
        list(where.why),
        [
            f"From the RolloutManager's node: `curl -s -m 10 -o /dev/null -w '%{{http_code}} "
            f"%{{time_total}}s\\n' {svc.url}` (a hang or a 5xx is the service's own problem)",
            f"Look at the {svc.kind.value}'s own logs, load and GPU: it accepted the "
            "connections and has not answered",
            "slime's remote_rm waits as long as its aiohttp session lets it (January 2026: "
            "aiohttp's default 300 s per request; August 2026: 120 s, retried 10 times): "
            "give a custom reward or tool client a timeout so that a wedged service fails a "
            "step instead of stopping the job",
        ],
    )


ANALYSIS = SourceAnalysis(
    name="rollout",
    gives=(ROLLOUT, SGLANG, SOCKETS),
    holds=(ROLLOUT,),
    suspects=suspects,
    evidence=evidence,
    messages=MESSAGES,
    causes=(_requests_at_proxy, _requests_at_external_service),
)
