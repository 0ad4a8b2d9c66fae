"""Who waits for whom: the waits the analysis already found, gathered as typed edges (`Wait`).

Pure. Each gatherer reads what one part of the analysis knows and says it as waits, with the
evidence that showed each one (prefixed by its source, as a culprit's `why` is):

- Ray calls (`ray_tasks`): an actor's running method whose call to another actor runs now (its
  child task in Ray's task list: `ray_call`), and a call queued on an actor behind the method it
  runs (actor_queues' wait-for edges: `queue`). A call the job's driver made is the driver's when
  its task id is the driver task of that job (Ray: `TaskID.for_driver_task`, all `f` then the job
  id) and the driver waits in `ray.get`.
- HTTP (`sockets`, `sglang`, `stacks`): a caller that holds connections to an engine with a
  request in flight on them (network.held_requests, issue 27's evidence), the router's chain to it,
  and an engine's own Ray actor blocked in an HTTP call to its own server.
- Collectives (`stacks` and the culprit's sources): a process waiting in a collective that the
  culprit, named by the suspect finders, is not in (a culprit that is a train rank or an engine:
  the roles that take part in collectives).
- Children (`stacks`): a slime process waiting for a child it forked that kept its title.

This module only gathers: it blames no one and changes no verdict. Issue 34 extends it with waits
from Ray's task and object state.
"""

from __future__ import annotations

from collections.abc import Iterable

from slime_hangdoctor.analysis.actor_queues import build_view
from slime_hangdoctor.analysis.merge import Merged
from slime_hangdoctor.analysis.network import held_requests, is_router
from slime_hangdoctor.analysis.readers.sglang_http import EngineRead
from slime_hangdoctor.analysis.signatures import Block
from slime_hangdoctor.analysis.world import Proc, World
from slime_hangdoctor.parsers.ray_state import RAY_STATE, TASK_RUNNING_ANY, RayTask
from slime_hangdoctor.topology import MemberKind
from slime_hangdoctor.verdict import Role, Wait, WaitKind, WaitParty

__all__ = ["find_waits", "party"]


def party(p: Proc) -> WaitParty:
    """A process as one end of a wait."""
    return WaitParty(
        label=p.label,
        role=p.role,
        node_ip=p.node_ip,
        pid=p.pid,
        url=p.engine_url,
        actor_id=p.actor_id,
    )


def _engine_party(world: World, e: EngineRead) -> WaitParty:
    """An engine as what an HTTP request waits on: its HTTP server where one is known."""
    server = e.server
    if server is not None:
        return party(server)
    return WaitParty(label=f"engine {e.url}", role=Role.SGLANG_ENGINE, node_ip=e.node_ip, url=e.url)


def find_waits(
    world: World, engines: tuple[EngineRead, ...], culprits: tuple[Merged, ...]
) -> tuple[Wait, ...]:
    """Every wait found, each pair of parties and kind once (the evidence of repeats joined)."""
    found: dict[tuple[object, ...], Wait] = {}
    for w in (
        *_ray_waits(world),
        *_http_waits(world, engines),
        *_collective_waits(world, culprits),
        *_child_waits(world),
    ):
        if w.waiter == w.waited_for:
            continue
        key = (w.waiter, w.waited_for, w.kind)
        old = found.get(key)
        evidence = w.evidence if old is None else tuple(dict.fromkeys(old.evidence + w.evidence))
        found[key] = Wait(w.waiter, w.waited_for, w.kind, evidence)
    return tuple(found.values())


# --------------------------------------------------------------------------- Ray calls


def _actor_procs(world: World) -> dict[str, Proc]:
    return {
        p.actor_id: p
        for p in world.procs
        if p.actor_id and p.member is not None and p.member.kind is MemberKind.ACTOR
    }


def _is_driver_task(task_id: str, job_id: str | None) -> bool:
    """Ray's driver task id of a job: `f` repeated, then the job id (TaskID.for_driver_task)."""
    if not job_id or not task_id.endswith(job_id) or len(task_id) <= len(job_id):
        return False
    return set(task_id[: -len(job_id)]) == {"f"}


def _ray_waits(world: World) -> Iterable[Wait]:
    snapshot = world.snapshot
    if not snapshot.joined(RAY_STATE).task_pages:
        return
    known: dict[str, RayTask] = {}
    for page in sorted(snapshot.joined(RAY_STATE).task_pages, key=lambda p: (p.sample, p.time)):
        for t in page.tasks:
            known[t.task_id] = t
    actors = _actor_procs(world)
    drivers = [
        p
        for p in world.by_role(Role.DRIVER)
        if p.latest is not None and p.latest.block is Block.RAY_GET
    ]
    view = build_view(snapshot)
    running = {
        t.task_id: t
        for q in (view.queues if view is not None else ())
        for t in q.running
        if t.state in TASK_RUNNING_ANY
    }
    for t in running.values():
        callee = actors.get(t.actor_id or "")
        if callee is None or not t.parent_task_id:
            continue
        parent = running.get(t.parent_task_id) or known.get(t.parent_task_id)
        if parent is not None and parent.actor_id and parent.state in TASK_RUNNING_ANY:
            caller = actors.get(parent.actor_id)
            if caller is None or parent.actor_id == t.actor_id:
                continue
            yield Wait(
                party(caller),
                party(callee),
                WaitKind.RAY_CALL,
                (
                    f"[ray_tasks] {caller.label}'s running {parent.method} called "
                    f"{t.name}, which runs now (task {t.task_id[:12]})",
                ),
            )
        elif parent is None and len(drivers) == 1 and _is_driver_task(t.parent_task_id, t.job_id):
            driver = drivers[0]
            assert driver.latest is not None
            yield Wait(
                party(driver),
                party(callee),
                WaitKind.RAY_CALL,
                (
                    f"[ray_tasks] the driver called {t.name}, which runs now "
                    f"(task {t.task_id[:12]})",
                    f"[stacks] driver is {driver.latest.describe()}",
                ),
            )
    for e in view.edges if view is not None else ():
        waiter, holder = actors.get(e.waiter), actors.get(e.holder)
        if waiter is None or holder is None:
            continue
        how = (
            f"{waiter.label}'s running {e.waiting.method} called"
            if e.kind == "child" and e.waiting is not None
            else f"a call made beside {waiter.label}'s running "
            f"{e.waiting.method if e.waiting is not None else 'method'} is"
        )
        yield Wait(
            party(waiter),
            party(holder),
            WaitKind.QUEUE,
            (
                f"[ray_tasks] {how} {e.queued.name}, queued on {holder.label} behind its "
                f"running {e.holding.method}",
            ),
        )


# --------------------------------------------------------------------------- HTTP


def _http_waits(world: World, engines: tuple[EngineRead, ...]) -> Iterable[Wait]:
    for h in held_requests(world, engines):
        target = _engine_party(world, h.engine)
        evidence = tuple(f"[{i.kind.value}] {i.text}" for i in h.in_flight)
        for caller, n in h.callers:
            yield Wait(
                party(caller),
                target,
                WaitKind.HTTP_REQUEST,
                (f"[sockets] {caller.label} holds {n} connection(s) to engine {h.engine.url}",)
                + evidence,
            )
        routers = [p for p, _ in h.callers if is_router(p)]
        for line in h.chain:
            for rm in world.by_role(Role.ROLLOUT_MANAGER):
                if line.startswith(f"{rm.label} (pid {rm.pid})"):
                    for router in routers:
                        yield Wait(
                            party(rm),
                            party(router),
                            WaitKind.HTTP_REQUEST,
                            (f"[sockets] chain: {line}",),
                        )
    by_url = {e.url: e for e in engines}
    for p in world.procs:
        read = p.latest
        if (
            read is None
            or p.kind is not MemberKind.ACTOR
            or p.engine_url is None
            or read.block is not Block.HTTP
        ):
            continue
        e = by_url.get(p.engine_url)
        if e is None or e.server is None or e.server is p:
            continue
        yield Wait(
            party(p),
            party(e.server),
            WaitKind.HTTP_REQUEST,
            (f"[stacks] {p.label} is {read.describe()}, a call to its own engine's server",),
        )


# --------------------------------------------------------------------------- collectives


def _culprit_proc(world: World, m: Merged) -> Proc | None:
    """The process a collective waits on: the culprit's, or for an engine its scheduler (the
    process that takes part in a weight broadcast): the culprit's own where it is one (the
    wedged TP rank, merge.holder)."""
    c = m.culprit()
    proc = world.find(c.pid, c.node_ip)
    if proc is not None and proc.kind is MemberKind.SCHEDULER:
        return proc
    proc = world.find(m.first("pid"), m.first("node_ip"))  # type: ignore[arg-type]
    url = m.first("engine_url")
    if url is not None:
        schedulers = [
            p for p in world.procs if p.engine_url == url and p.kind is MemberKind.SCHEDULER
        ]
        if schedulers:
            return schedulers[0]
    return proc


# the roles that take part in the job's collectives (train ranks; engines' schedulers in a weight
# broadcast): a collective waits on a culprit of these roles only
_IN_COLLECTIVES = frozenset({Role.TRAIN_RANK, Role.SGLANG_ENGINE})


def _collective_waits(world: World, culprits: tuple[Merged, ...]) -> Iterable[Wait]:
    targets = [
        (m, p)
        for m in culprits
        if m.role in _IN_COLLECTIVES and (p := _culprit_proc(world, m)) is not None
    ]
    if not targets:
        return
    blamed = {p.pid for _, p in targets} | {
        s.pid for m, _ in targets for s in m.suspects if s.pid is not None
    }
    for p in world.procs:
        read = p.latest
        if read is None or p.role is None or p.pid in blamed or not read.primary.in_collective:
            continue
        for m, target in targets:
            why = m.culprit().why.split(" | ")[0]
            yield Wait(
                party(p),
                party(target),
                WaitKind.COLLECTIVE,
                (
                    f"[stacks] {p.label} is {read.describe()}",
                    f"[{', '.join(sorted(m.sources))}] {why}",
                ),
            )


# --------------------------------------------------------------------------- children


def _child_waits(world: World) -> Iterable[Wait]:
    for p in world.procs:
        read = p.latest
        if read is None or p.is_child or not read.primary.waiting:
            continue
        for child in world.children_of(p):
            state = child.latest.describe() if child.latest is not None else "not read"
            yield Wait(
                party(p),
                party(child),
                WaitKind.CHILD,
                (
                    f"[stacks] {p.label} is {read.describe()}",
                    f"[stacks] its child {child.label} is {state}",
                ),
            )
