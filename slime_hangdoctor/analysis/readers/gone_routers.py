"""A router of the job that is gone: its answers stopped, and what its process, its port and its
children say of it (`gone_routers`). A reader because the routers part blames it, the processes
part does not tell a gone router twice, and the advice names its restart."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from slime_hangdoctor.analysis.world import Proc, World
from slime_hangdoctor.outcome import Outcome
from slime_hangdoctor.parsers.processes import SPEC as PROCESSES
from slime_hangdoctor.parsers.processes import STATUS_ZOMBIE
from slime_hangdoctor.parsers.sglang import (
    HTTP_ANSWERS,
    HttpAnswer,
    HttpPeer,
)
from slime_hangdoctor.topology import KnownRouter, given_routers, launched_routers
from slime_hangdoctor.verdict import Role


def last_answers(world: World) -> tuple[int, dict[str, list[HttpAnswer]]]:
    """The last sample that probed a router, and each router's answers there."""
    by_url: dict[str, list[HttpAnswer]] = {}
    last = max(
        (o.sample for o in world.snapshot.joined(HTTP_ANSWERS) if o.kind is HttpPeer.ROUTER),
        default=0,
    )
    for o in world.snapshot.joined(HTTP_ANSWERS):
        if o.kind is HttpPeer.ROUTER and o.sample == last:
            by_url.setdefault(o.answer.url, []).append(o.answer)
    return last, by_url


def gone_routers(world: World) -> list[GoneRouter]:
    """Every router of the job that is gone (`gone_router`)."""
    out: list[GoneRouter] = []
    for url, answers in last_answers(world)[1].items():
        proc = next((p for p in world.by_role(Role.ROUTER) if p.engine_url == url), None)
        if (gone := gone_router(world, url, answers, proc)) is not None:
            out.append(gone)
    return out


@dataclass(frozen=True)
class GoneRouter:
    """A router the job launched or was given that is not there any more."""

    url: str
    known: KnownRouter  # where the job names it
    answers: tuple[HttpAnswer, ...]  # the doctor's refused probes of it (last sample)
    proc: Proc | None  # its process: a zombie, or one seen earlier in this run and gone since
    owner: Proc | None  # the RolloutManager that launched it (slime's `_start_router`)
    waiting: tuple[Proc, ...]  # RolloutManagers with a rollout method running

    @property
    def blamed(self) -> Proc | None:
        """The process the culprit names: the router's own while the kernel still lists it (a
        zombie keeps its pid until its parent reaps it), else the RolloutManager that launched
        and owned it (its child is reaped; restarting it means restarting that actor's job)."""
        return self.proc if self.proc is not None else self.owner


def gone_router(
    world: World, url: str, answers: list[HttpAnswer], proc: Proc | None
) -> GoneRouter | None:
    """The router at `url` is gone: the job names it (slime's `Router launched at` line in the
    RolloutManager's log, the user's `--sglang-router-ip/port`, or its process seen in this run),
    every probe of it was refused (no answer, the collector's `unavailable`: nothing listens
    there, not a timeout), no process of the job listens on its port any more, its process (if
    known) is a zombie or gone, and a RolloutManager is running a rollout method. A router that
    is alive but slow times out instead, and keeps the rules below."""
    if not answers or any(
        a.status is not None or a.outcome is not Outcome.UNAVAILABLE for a in answers
    ):
        return None
    if proc is not None and not proc.dead:
        return None
    known = known_router(world, url, proc)
    if known is None:
        return None
    owner = next(
        (
            p
            for p in world.by_role(Role.ROLLOUT_MANAGER)
            if known.launched_by is not None
            and p.pid == known.launched_by
            and (proc is None or p.node_ip == proc.node_ip)
        ),
        None,
    )
    where = proc if proc is not None else owner
    node = where.node_ip if where is not None else None
    if listened_by(world, url, node) is not None:
        return None
    waiting = tuple(
        p
        for p in world.by_role(Role.ROLLOUT_MANAGER)
        if p.member is not None and p.member.method is not None and not p.dead
    )
    if not waiting:
        return None
    return GoneRouter(url, known, tuple(answers), proc, owner, waiting)


def known_router(world: World, url: str, proc: Proc | None) -> KnownRouter | None:
    for (_node, _pid), found in launched_routers(world.snapshot).items():
        for r in found:
            if r.url == url:
                return r
    procs = {(i.node_ip, i.pid): i for p in world.procs for _, i in p.infos[-1:]}
    for r in given_routers(list(world.topology.members), procs, world.snapshot):
        if r.url == url:
            return r
    if proc is not None:
        return KnownRouter(url, f"its process pid {proc.pid} seen in this run", proc.parent_pid)
    return None


def url_port(url: str) -> int | None:
    try:
        return urlsplit(url).port
    except ValueError:
        return None


_LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "0.0.0.0", "::"})


def listened_by(world: World, url: str, node: str | None) -> Proc | None:
    """A live process of the job on `url`'s host (`node` for a loopback URL, where known) that
    listens on its port (at its last /proc sample)."""
    port = url_port(url)
    if port is None:
        return None
    host = urlsplit(url).hostname or ""
    for p in world.procs:
        if p.dead or not p.infos:
            continue
        here = node if host in _LOCAL_HOSTS else host
        if here is not None and p.node_ip is not None and p.node_ip != here:
            continue
        info = p.infos[-1][1]
        if port in info.listen_ports or any(
            a.rpartition(":")[2] == str(port) for a in info.listen_addrs
        ):
            return p
    return None


def zombie_children(world: World, parent: Proc) -> list[int]:
    """Pids of `parent`'s zombie children in the last process table of its node."""
    tables = [o for o in world.snapshot.facts(PROCESSES) if o.node_ip == parent.node_ip]
    if not tables:
        return []
    last = max(tables, key=lambda o: o.sample)
    return sorted(p.pid for p in last.fact if p.ppid == parent.pid and p.status == STATUS_ZOMBIE)
