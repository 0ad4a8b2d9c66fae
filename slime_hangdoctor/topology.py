"""Who is who in a slime job: roles of processes, from Ray state and process titles. Pure."""

from __future__ import annotations

import dataclasses
import functools
import re
import shlex
from dataclasses import dataclass
from enum import Enum
from typing import Literal

from slime_hangdoctor.parsers.log_heads import SPEC as LOG_HEADS
from slime_hangdoctor.parsers.processes import SPEC as PROCESSES
from slime_hangdoctor.parsers.processes import STATUS_ZOMBIE, ProcessInfo
from slime_hangdoctor.parsers.pyspy import ALL_STACKS
from slime_hangdoctor.parsers.ray_state import (
    ACTOR_ALIVE,
    JOB_RUNNING,
    RAY_STATE,
    TASK_RUNNING,
    RayJob,
)
from slime_hangdoctor.parsers.sglang import HTTP_ANSWERS, HttpPeer, RouterWorkers
from slime_hangdoctor.parsers.sockets import SPEC as SOCKETS
from slime_hangdoctor.parsers.sockets import TCP_ESTABLISHED
from slime_hangdoctor.snapshot import Snapshot
from slime_hangdoctor.verdict import Role


class MemberKind(str, Enum):
    """What process of its role a member is."""

    ACTOR = "actor"  # the Ray actor's own worker process
    HTTP_SERVER = "http_server"  # an SGLang engine's HTTP server (tokenizer manager)
    SCHEDULER = "scheduler"  # sglang::scheduler_* (one per TP/PP/DP rank)
    DETOKENIZER = "detokenizer"  # sglang::detokenizer
    DETOKENIZER_ROUTER = "detokenizer_router"  # multi-tokenizer mode's router of outputs
    DATA_PARALLEL_CONTROLLER = "data_parallel_controller"  # dp_size > 1
    TOKENIZER_WORKER = "tokenizer_worker"  # multi-tokenizer mode
    SGLANG_HELPER = "sglang_helper"  # another sglang:: process
    DRIVER = "driver"  # the job's driver (train.py)
    ROUTER = "router"  # sgl-router
    PROCESS = "process"  # a process of the role that is no actor (a bare torchrun rank)
    # the launcher of a multi-node engine's node of rank >= 1: its schedulers' parent, serving
    # SGLang's dummy health check, not the engine's API (`_join_engine_nodes`)
    NODE_LAUNCHER = "node_launcher"
    CHILD = "child"  # forked by a slime process, kept its title (a checkpoint writer)


# How a member was found: Ray's state API, its process title, the job API, the environment (RANK),
# the head of an actor's log.
MemberSource = Literal["ray-state", "proc-title", "job-api", "env", "actor-log"]
# Where an engine's URL was learned: a listening server, an actor's log head, the user, the job's
# arguments (`--rollout-external-engine-addrs`), a router's worker list, an earlier answer of the
# run.
EngineSource = Literal[
    "proc-listen", "actor-log", "user-flag", "job-args", "router", "earlier-answer"
]
# The members that run a role's own code: an actor, or a process that is none (a bare rank).
_OWN_PROCESS = frozenset({MemberKind.ACTOR, MemberKind.PROCESS})


@dataclass(frozen=True)
class Member:
    """One slime process and the role it plays."""

    role: Role
    pid: int
    node_ip: str | None
    kind: MemberKind
    title: str = ""
    actor_id: str | None = None
    class_name: str | None = None
    method: str | None = None  # running Ray method ("update_weights"), from the title or tasks
    rank: int | None = None  # train rank
    engine_url: str | None = None  # for engine actors, their servers and schedulers
    parent_pid: int | None = None
    source: MemberSource = "ray-state"
    rank_inferred: bool = False  # rank guessed from process order, not read from RANK / RAS / FR

    @property
    def label(self) -> str:
        if self.role is Role.TRAIN_RANK and self.rank is not None:
            rank = f"train rank {self.rank}{'?' if self.rank_inferred else ''}"
            return f"{rank} child (pid {self.pid})" if self.kind is MemberKind.CHILD else rank
        if self.kind is MemberKind.CHILD:  # a process forked by a slime actor, as its child
            return f"{str(self.role.value).replace('_', ' ')} child (pid {self.pid})"
        if self.role is Role.SGLANG_ENGINE:
            names = {
                MemberKind.ACTOR: "engine actor",
                MemberKind.HTTP_SERVER: "engine server",
                MemberKind.NODE_LAUNCHER: "engine node launcher",
            }
            return f"{names.get(self.kind, self.kind.value)} {self.engine_url or ''}".strip()
        return str(self.role.value).replace("_", " ")


@dataclass(frozen=True)
class Engine:
    """One SGLang engine (HTTP server) to probe."""

    url: str
    node_ip: str | None = None
    actor_pid: int | None = None
    server_pid: int | None = None
    source: EngineSource = "proc-listen"
    origin: str = ""  # where the URL was read, in words, where the source alone does not say
    # a server that is gone, on a node where as many of the job's engine actors or more have none
    # (which of them was its actor, nothing says: `_pair_lost_servers`)
    lost_server: bool = False

    @property
    def listed_only(self) -> bool:
        """Only a router's worker list names it: no process of the job serves it (nor served it:
        `_pair_lost_servers`), the job's own arguments do not name it, nor did the user. Anyone
        who reaches the router's worker registration can put a URL there: such an engine is
        probed without the API key and never weighs on the verdict (`Topology.listed`)."""
        return (
            self.source == "router"
            and self.actor_pid is None
            and self.server_pid is None
            and not self.lost_server
        )


@dataclass(frozen=True)
class Topology:
    members: tuple[Member, ...] = ()
    engines: tuple[Engine, ...] = ()
    routers: tuple[str, ...] = ()
    job_running: bool | None = None  # a Ray job (driver) is RUNNING
    # URLs a router lists that are not the job's engines (`Engine.listed_only`): reported as
    # listed by the router, probed without the API key, kept out of `engines` (status, progress,
    # culprits, the watchdog's counter plan)
    listed: tuple[Engine, ...] = ()
    # the URLs of multi-node engines' node launchers (SGLang's dummy health server on a node of
    # rank >= 1, `_join_engine_nodes`): they answer /health, but they are no engine
    launchers: tuple[str, ...] = ()

    def by_role(self, role: Role) -> tuple[Member, ...]:
        return tuple(m for m in self.members if m.role is role)

    def member(self, pid: int, node_ip: str | None = None) -> Member | None:
        for m in self._by_pid.get(pid, ()):
            if node_ip is None or m.node_ip in (None, node_ip):
                return m
        return None

    @functools.cached_property
    def _by_pid(self) -> dict[int, tuple[Member, ...]]:
        """The members by pid, in `members` order: built once, so that looking up every process
        of a large job stays linear (issue 46)."""
        found: dict[int, list[Member]] = {}
        for m in self.members:
            found.setdefault(m.pid, []).append(m)
        return {pid: tuple(group) for pid, group in found.items()}


# --------------------------------------------------------------------------- building it


@dataclass(frozen=True)
class SlimeActor:
    """One Ray actor class of slime, as the Ray state API names it (`class_name`, and the
    `ray::Class` of its process title), the role its process plays, and where the class is
    defined (a file of the tree read at `commit`; tests/unit/test_signature_layouts.py checks it
    against the recorded lists of tests/fixtures/layouts). miles keeps the same class names under
    `miles/`. `role` None: a slime actor that plays no role of its own (it is part of the job, but
    not a member of the topology). `starts_router`: the class's process starts slime's router as
    its child (a fork or spawn in its constructor): a child of it that listens on ports of its own
    is the router."""

    cls: str
    role: Role | None
    file: str
    commit: str
    starts_router: bool = False


_MAIN = "624b824"  # THUDM/slime main, 2026-08-21 (tests/fixtures/layouts/README.md)
_JAN = "9bfe152"  # THUDM/slime, 2026-01-20: the January 2026 layout
_MILES = "31f1ca961"  # radixark/miles main, 2026-08-21
# THUDM/slime's open ServingCluster work, the stored version of slime/ray/serving.py
# (tests/fixtures/layouts/README.md says how it was read)
_SERVING = "15b8e507"

# The one table of slime's actor classes; every other list of them is derived below.
SLIME_ACTORS: tuple[SlimeActor, ...] = (
    # starts the router: `_start_router` (slime/ray/rollout.py:916-968@624b824, from
    # start_rollout_servers :1019, in __init__ :370-417; :634-675@9bfe152 from __init__ :51);
    # miles's `start_router` (miles/ray/rollout/router_manager.py:18-78@31f1ca961, a spawn child)
    SlimeActor(
        "RolloutManager", Role.ROLLOUT_MANAGER, "slime/ray/rollout.py", _MAIN, starts_router=True
    ),
    # Teacher-server mode's stand-in for the RolloutManager: "Minimal rollout-manager surface
    # plus request queue" (slime/backends/megatron_utils/server/megatron_server.py:83-84@624b824).
    # `launch` hands it to `create_training_models` as the train ranks' `rollout_manager`
    # (megatron_server.py:729-735@624b824, slime/ray/placement_group.py:186@624b824), and the
    # ranks' data comes from its queue (`get_input_data`): it stands where the RolloutManager
    # stands, so it takes that role. No new Role: one would need its own labels, rules and next
    # steps with no recorded run of that mode to test them on.
    SlimeActor(
        "SampleManager",
        Role.ROLLOUT_MANAGER,
        "slime/backends/megatron_utils/server/megatron_server.py",
        _MAIN,
    ),
    SlimeActor(
        "SGLangEngine", Role.SGLANG_ENGINE, "slime/backends/sglang_utils/sglang_engine.py", _MAIN
    ),
    SlimeActor(
        "MegatronTrainRayActor", Role.TRAIN_RANK, "slime/backends/megatron_utils/actor.py", _MAIN
    ),
    # Teacher-server mode's train ranks: a MegatronTrainRayActor subclass
    # (slime/backends/megatron_utils/server/logprob_utils.py:454@624b824), one per GPU through
    # `create_training_models(..., actor_cls=TeacherLogpRayActor)` (megatron_server.py:735@624b824).
    SlimeActor(
        "TeacherLogpRayActor",
        Role.TRAIN_RANK,
        "slime/backends/megatron_utils/server/logprob_utils.py",
        _MAIN,
    ),
    # Gone from slime main; the January layout has it, and miles keeps it
    # (miles/backends/fsdp_utils/actor.py:54@31f1ca961).
    SlimeActor("FSDPTrainRayActor", Role.TRAIN_RANK, "slime/backends/fsdp_utils/actor.py", _JAN),
    # The RolloutManager's weight-sync lock (slime/ray/utils.py:58@624b824, created at
    # slime/ray/rollout.py:403@624b824): `acquire` is a test-and-set that returns at once, and the
    # caller spins on it, so a held lock shows on the train rank's stack, not in this process.
    SlimeActor("Lock", None, "slime/ray/utils.py", _MAIN),
    # slime's next layout (open work, THUDM/slime@15b8e507 slime/ray/serving.py:23-51): "A named,
    # detached owner for routers, engines and their GPU placements". Its constructor starts the
    # routers and engines (`start_rollout_servers`, slime/backends/sglang_utils/deployment.py:
    # 79-146@1e8bafac, which forks each router with `_start_router` :18-62, called at :101) and
    # keeps the routers it forked (serving.py:37-43); it owns the health monitors and the
    # weight-update lock. It plays no role of its own (the RolloutManager still runs the rollout),
    # but its children are the job's routers.
    SlimeActor("ServingCluster", None, "slime/ray/serving.py", _SERVING, starts_router=True),
    # miles's multi-LoRA controller (miles/ray/multi_lora/controller.py:59-60@31f1ca961), a named
    # async actor the driver creates (train_multi_lora_async.py:46): part of the job, no role.
    SlimeActor("MultiLoRAController", None, "miles/ray/multi_lora/controller.py", _MILES),
)
# Not listed: InfoActor (slime/ray/placement_group.py:16@624b824), killed as soon as it has read
# its bundle's IP and GPU id; TrainRayActor, the train ranks' base class, which Ray never names (it
# wraps the subclass: slime/ray/actor_group.py:113@624b824); --use-distributed-post's HTTP posters
# (slime/utils/http_utils.py:255-256@624b824), created `lifetime="detached"` (:279): they outlive
# the job, so one alive says nothing of it. (Ray names a class defined in a function by its
# qualified name, `_init_ray_distributed_post.<locals>._HttpPosterActor`.)

# Every slime actor class (the job is still there while one is alive)
SLIME_ACTOR_CLASSES = frozenset(a.cls for a in SLIME_ACTORS)
# The role of the process of each slime actor class that plays one
CLASS_ROLES: dict[str, Role] = {a.cls: a.role for a in SLIME_ACTORS if a.role is not None}
# The slime actor classes whose process starts the router as its child
ROUTER_PARENTS = frozenset(a.cls for a in SLIME_ACTORS if a.starts_router)
DRIVER_SCRIPTS = ("train.py", "train_async.py")


def parse_ray_title(title: str) -> tuple[str, str | None] | None:
    """`ray::Class.method ...` -> (Class, method); `ray::Class` -> (Class, None); else None.
    While a named actor's constructor runs, Ray titles its process `ray::<name>:Class.__init__`
    (recorded: slime's ServingCluster, named `slime_serving_cluster`, and the router it forked
    then, tests/fixtures/analysis/demo/serving_cluster_engine_stuck.tar.gz): the name, which may
    hold dots (SGLang names its scheduler actors after an IP), goes before the last colon."""
    if not title.startswith("ray::"):
        return None
    head = title[5:].split(" ", 1)[0].strip().rsplit(":", 1)[-1]
    if not head:
        return None
    cls, _, method = head.partition(".")
    return cls, (method or None)


def _latest_processes(snapshot: Snapshot) -> dict[tuple[str | None, int], ProcessInfo]:
    out: dict[tuple[str | None, int], ProcessInfo] = {}
    for obs in sorted(snapshot.facts(PROCESSES), key=lambda o: o.sample):
        for p in obs.fact:
            out[(obs.node_ip, p.pid)] = p
    return out


def listen_urls(proc: ProcessInfo, node_ip: str | None) -> tuple[str, ...]:
    """`http://host:port` of each listening socket of `proc`, in its order (a wildcard address is
    the node's)."""
    out: list[str] = []
    for addr in proc.listen_addrs:
        host, _, port = addr.rpartition(":")
        host = host.strip("[]")
        if not port.isdigit():
            continue
        if host in ("", "0.0.0.0", "::"):
            host = node_ip or "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        out.append(f"http://{host}:{port}")
    return tuple(out)


def _engine_url(proc: ProcessInfo, node_ip: str | None) -> str | None:
    urls = listen_urls(proc, node_ip)
    if urls:
        return urls[0]
    if proc.listen_ports:
        return f"http://{node_ip or '127.0.0.1'}:{min(proc.listen_ports)}"
    return None


def _router_url(proc: ProcessInfo, node_ip: str | None) -> str | None:
    """The router's HTTP address among its own listening sockets. sgl-router also serves
    Prometheus on a port of its own, bound to every address unless --prometheus-host says
    otherwise; slime binds the router itself to the node's IP (`router_args.host = router_ip` in
    `_start_router`): an address bound to one host goes first."""
    specific = tuple(
        a
        for a in proc.listen_addrs
        if a.rpartition(":")[0].strip("[]") not in ("", "0.0.0.0", "::")
    )
    ordered = specific + tuple(a for a in proc.listen_addrs if a not in specific)
    return _engine_url(dataclasses.replace(proc, listen_addrs=ordered), node_ip)


def build_topology(snapshot: Snapshot) -> Topology:
    """Roles of the slime processes seen in `snapshot` (Ray state first, process titles second)."""
    procs = _latest_processes(snapshot)
    node_ip_of = {n.node_id: n.node_ip for n in snapshot.joined(RAY_STATE).nodes}
    running = {
        t.actor_id: t.name
        for t in snapshot.joined(RAY_STATE).tasks
        if t.actor_id and t.state == TASK_RUNNING
    }
    members: dict[tuple[str | None, int], Member] = {}

    def proc_node(pid: int, hint: str | None) -> str | None:
        if (hint, pid) in procs:
            return hint
        nodes = [n for (n, p) in procs if p == pid]
        return nodes[0] if len(nodes) == 1 else hint

    for a in snapshot.joined(RAY_STATE).actors:
        role = CLASS_ROLES.get(a.class_name)
        if role is None or a.pid is None or a.state != ACTOR_ALIVE:
            continue
        node = proc_node(a.pid, a.node_ip or node_ip_of.get(a.node_id or ""))
        info = procs.get((node, a.pid))
        title = info.title if info else ""
        parsed = parse_ray_title(title)
        method = running.get(a.actor_id, "").partition(".")[2] or (parsed[1] if parsed else None)
        members[(node, a.pid)] = Member(
            role,
            a.pid,
            node,
            MemberKind.ACTOR,
            title,
            a.actor_id,
            a.class_name,
            method,
            source="ray-state",
        )
    for (node, pid), p in procs.items():
        parsed = parse_ray_title(p.title)
        if (node, pid) in members or parsed is None or parsed[0] not in CLASS_ROLES:
            continue
        if CLASS_ROLES[parsed[0]] is not Role.TRAIN_RANK and forked_from_actor((node, pid), procs):
            # a child that kept its actor's title across a fork is not that actor: the router or a
            # server below the RolloutManager or an engine actor (found from them, below); a train
            # rank's child is labelled as that rank's child (`_assign_ranks`)
            continue
        members[(node, pid)] = Member(
            CLASS_ROLES[parsed[0]],
            pid,
            node,
            MemberKind.ACTOR,
            p.title,
            None,
            parsed[0],
            parsed[1],
            source="proc-title",
        )
    _add_engine_processes(members, procs)
    launchers = _join_engine_nodes(members, procs, snapshot)
    _add_ray_mode_schedulers(members, procs, snapshot, node_ip_of)
    logged = _logged_urls(snapshot)
    _add_logged_urls(members, logged)
    _add_routers(
        members, procs, _router_code_pids(snapshot), _router_owners(snapshot, procs, node_ip_of)
    )
    launched = launched_routers(snapshot)
    _add_killed_routers(members, procs, launched)
    _add_rollout_children(members, procs)
    _add_drivers(members, procs, snapshot)
    _add_distributed_ranks(members, procs)
    final = _assign_ranks(list(members.values()), procs)
    engines = _engines(final, snapshot, logged, procs, launchers)
    final, engines = _pair_lost_servers(final, engines)
    listed = tuple(e for e in engines if e.listed_only)
    engines = tuple(e for e in engines if not e.listed_only)
    routers = _router_urls(final, launched, procs, snapshot)
    return Topology(
        tuple(final), engines, routers, _job_running(snapshot), listed, tuple(sorted(launchers))
    )


def _router_urls(
    final: list[Member],
    launched: dict[tuple[str | None, int], list[KnownRouter]],
    procs: dict[tuple[str | None, int], ProcessInfo],
    snapshot: Snapshot,
) -> tuple[str, ...]:
    """Every router's URL, once, in order: those a router process serves, those the job
    launched (gone or not), those the job's arguments or the user give."""
    return tuple(
        dict.fromkeys(
            [m.engine_url for m in final if m.role is Role.ROUTER and m.engine_url]
            + [r.url for found in launched.values() for r in found]
            + [r.url for r in given_routers(final, procs, snapshot)]
        )
    )


def _job_running(snapshot: Snapshot) -> bool | None:
    """Whether a Ray job (a driver other than the doctor's own) is RUNNING; None without jobs."""
    doctor = snapshot.manifest.target.get("doctor_pid")
    jobs = [
        j for j in snapshot.joined(RAY_STATE).jobs if j.driver_pid is None or j.driver_pid != doctor
    ]
    return any(j.status == JOB_RUNNING for j in jobs) if jobs else None


def _descendants(
    root: int, node: str | None, procs: dict[tuple[str | None, int], ProcessInfo]
) -> list[ProcessInfo]:
    children: dict[int, list[ProcessInfo]] = {}
    for (n, _pid), p in procs.items():
        if n == node and p.ppid is not None:
            children.setdefault(p.ppid, []).append(p)
    out: list[ProcessInfo] = []
    stack = [root]
    seen = {root}
    while stack:
        for child in children.get(stack.pop(), []):
            if child.pid not in seen:
                seen.add(child.pid)
                out.append(child)
                stack.append(child.pid)
    return out


def _add_engine_processes(
    members: dict[tuple[str | None, int], Member], procs: dict[tuple[str | None, int], ProcessInfo]
) -> None:
    actors = [
        m for m in members.values() if m.role is Role.SGLANG_ENGINE and m.kind is MemberKind.ACTOR
    ]
    claimed: set[tuple[str | None, int]] = set()
    for actor in actors:
        desc = _descendants(actor.pid, actor.node_ip, procs)
        servers = [
            p
            for p in desc
            if not p.title.startswith("sglang::") and (p.listen_addrs or p.listen_ports)
        ]
        server = servers[0] if servers else None
        url = _engine_url(server, actor.node_ip) if server else None
        members[(actor.node_ip, actor.pid)] = _replace(actor, engine_url=url)
        for p in desc:
            kind = sglang_kind(p.title) or (MemberKind.HTTP_SERVER if p is server else None)
            if kind is None or p.title.split(" ", 1)[0] == ROUTER_TITLE:
                continue
            claimed.add((actor.node_ip, p.pid))
            members[(actor.node_ip, p.pid)] = Member(
                Role.SGLANG_ENGINE,
                p.pid,
                actor.node_ip,
                kind,
                p.title,
                actor.actor_id,
                None,
                engine_url=url,
                parent_pid=p.ppid,
                source=actor.source,
            )
    # Engines not owned by a visible SGLangEngine actor (external engines, --local without Ray titles).
    for (node, pid), p in procs.items():
        kind = sglang_kind(p.title)
        if kind is None or (node, pid) in claimed or (node, pid) in members:
            continue
        if p.title.split(" ", 1)[0] == ROUTER_TITLE:
            continue  # the router (_add_routers), not a part of an engine
        parent = procs.get((node, p.ppid)) if p.ppid is not None else None
        url = None
        if parent is not None and not parent.title.startswith("sglang::"):
            url = _engine_url(parent, node)
            if (node, parent.pid) not in members and url:
                members[(node, parent.pid)] = Member(
                    Role.SGLANG_ENGINE,
                    parent.pid,
                    node,
                    MemberKind.HTTP_SERVER,
                    parent.title,
                    engine_url=url,
                    parent_pid=parent.ppid,
                    source="proc-title",
                )
        members[(node, pid)] = Member(
            Role.SGLANG_ENGINE,
            pid,
            node,
            kind,
            p.title,
            engine_url=url,
            parent_pid=p.ppid,
            source="proc-title",
        )


_TP_RANK = re.compile(r"sglang::scheduler\S*_TP(\d+)")


def scheduler_tp_rank(title: str) -> int | None:
    """A scheduler's TP rank, from its title (`sglang::scheduler_TP1`, scheduler.py:4247-4262);
    None for a title without one (tp=1, or not a scheduler)."""
    found = _TP_RANK.match(title)
    return int(found.group(1)) if found else None


def _join_engine_nodes(
    members: dict[tuple[str | None, int], Member],
    procs: dict[tuple[str | None, int], ProcessInfo],
    snapshot: Snapshot,
) -> frozenset[str]:
    """A multi-node SGLang engine (`--nnodes N --node-rank K --dist-init-addr A`; slime starts one
    SGLangEngine actor per node of it, sglang_engine.py:521-538@624b824) is one engine. A node of
    rank K >= 1 runs TP ranks above 0 only (0.5.15.post1 entrypoints/engine.py:1400-1431) and no
    detokenizer, under a launcher that serves SGLang's dummy health check on a port of its own
    (engine.py:835-862, utils/common.py:3006-3066), not the engine's API: such a part's listening
    process is its NODE_LAUNCHER, and its URL no engine's (a node-rank-0 part always has its
    detokenizer, whichever of its ranks died). Its schedulers keep their connection to the TP
    group's store at A, which TP rank 0 serves (torch 2.13 distributed/rendezvous.py:198,
    `start_daemon = rank == 0` for a `tcp://` rendezvous): where they hold an established
    connection to a port that a TP0 scheduler of another engine listens on (at that address, or
    on every address of its node), the part is a node of that engine and its members take that
    engine's URL. Returns the launchers' own URLs."""
    parts: dict[str, list[Member]] = {}
    for m in members.values():
        if m.role is Role.SGLANG_ENGINE and m.engine_url:
            parts.setdefault(m.engine_url, []).append(m)
    rank0 = {
        (m.node_ip, m.pid): m
        for m in members.values()
        if m.kind is MemberKind.SCHEDULER and scheduler_tp_rank(m.title) == 0 and m.engine_url
    }
    nodes = {url: part for url, part in parts.items() if _a_later_node(part)}
    joined: dict[str, str] = {}
    for url, part in nodes.items():
        pids = {(m.node_ip, m.pid) for m in part if m.kind is MemberKind.SCHEDULER}
        found = {t.engine_url for t in _store_peers(pids, rank0, procs, snapshot)} - {url, None}
        joined[url] = str(found.pop()) if len(found) == 1 else url
    for key, m in list(members.items()):
        if m.engine_url in joined:
            kind = MemberKind.NODE_LAUNCHER if m.kind is MemberKind.HTTP_SERVER else m.kind
            members[key] = _replace(m, engine_url=joined[str(m.engine_url)], kind=kind)
    return frozenset(joined)


def _a_later_node(part: list[Member]) -> bool:
    """The processes of one engine actor are a node of rank >= 1 of a multi-node engine: TP
    ranks, all above 0, and no detokenizer."""
    ranks = [scheduler_tp_rank(m.title) for m in part if m.kind is MemberKind.SCHEDULER]
    return (
        bool(ranks)
        and None not in ranks
        and 0 not in ranks
        and not any(m.kind is MemberKind.DETOKENIZER for m in part)
    )


def _store_peers(
    pids: set[tuple[str | None, int]],
    rank0: dict[tuple[str | None, int], Member],
    procs: dict[tuple[str | None, int], ProcessInfo],
    snapshot: Snapshot,
) -> list[Member]:
    """The TP0 schedulers (of `rank0`) that listen where the processes `pids` hold an established
    connection to."""
    out: list[Member] = []
    for obs in snapshot.facts(SOCKETS):
        for c in obs.fact:
            if (obs.node_ip, c.pid) not in pids or c.socket.state != TCP_ESTABLISHED:
                continue
            ip, port = c.socket.remote_ip, c.socket.remote_port
            for (node, pid), m in rank0.items():
                info = procs.get((node, pid))
                if info is not None and _listens_at(info, node, ip, port, obs.node_ip):
                    out.append(m)
    return out


def _listens_at(
    info: ProcessInfo, node: str | None, ip: str, port: int, caller_node: str | None
) -> bool:
    """`info` (a process of `node`) listens where a process of `caller_node` connected to
    `ip:port`: at that address, or on every address of its node; a loopback address only from
    its own node."""
    for addr in info.listen_addrs:
        host, _, text = addr.rpartition(":")
        host = host.strip("[]")
        if text != str(port):
            continue
        loopback = ip.startswith("127.") or ip == "::1"
        if loopback and caller_node != node:
            continue
        if host == ip or (host in ("", "0.0.0.0", "::") and (loopback or ip == node)):
            return True
    return False


# SGLang's process titles (setproctitle), 0.5.15.post1 and 0.5.23 alike: exact titles -> kind.
SGLANG_TITLES: dict[str, MemberKind] = {
    "sglang::detokenizer": MemberKind.DETOKENIZER,  # detokenizer_manager.py:489
    # multi-tokenizer mode's router of detokenizer outputs (multi_tokenizer_mixin.py:577): it
    # detokenizes nothing
    "sglang::detokenizer_router": MemberKind.DETOKENIZER_ROUTER,
    "sglang::data_parallel_controller": MemberKind.DATA_PARALLEL_CONTROLLER,  # dp_size > 1
}
# scheduler.py:4247-4262: "sglang::scheduler" + one "_<NAME><rank>" per parallel dimension that is
# in use, in this order (none at all when tp=1 without DP); "sglang::tokenizer_worker:<pid>" in
# multi-tokenizer mode (multi_tokenizer_mixin.py:601).
_SCHEDULER_TITLE = re.compile(
    r"sglang::scheduler(?:_DP\d+)?(?:_PP\d+)?(?:_ATTN_CP\d+)?"
    r"(?:_MOE_DP\d+)?(?:_TP\d+)?(?:_EP\d+)?"
)
_TOKENIZER_WORKER_TITLE = re.compile(r"sglang::tokenizer_worker:\d+")
COMM_MAX = 15  # bytes of a process's comm (TASK_COMM_LEN 16 with its NUL)


def sglang_kind(title: str) -> MemberKind | None:
    """The kind of SGLang process a title names; None for a title that is not SGLang's."""
    if not title.startswith("sglang::"):
        return None
    name = title.split(" ", 1)[0]
    if name in SGLANG_TITLES:
        return SGLANG_TITLES[name]
    if _SCHEDULER_TITLE.fullmatch(name):
        return MemberKind.SCHEDULER
    if _TOKENIZER_WORKER_TITLE.fullmatch(name):
        return MemberKind.TOKENIZER_WORKER
    if name.startswith("sglang::scheduler"):
        # a suffix order of another version: SGLang's own test is the prefix
        return MemberKind.SCHEDULER
    if len(name) == COMM_MAX and "sglang::scheduler".startswith(name):
        # a process that has exited (a zombie: no cmdline) keeps only its comm, the title's first
        # 15 bytes (TASK_COMM_LEN 16; setproctitle sets it with prctl PR_SET_NAME)
        return MemberKind.SCHEDULER
    return MemberKind.SGLANG_HELPER


# SGLang's Ray mode (`--use-ray`: 0.5.23 launch_server.py:52-61 -> srt/ray/http_server.py:27-70,
# which runs RayEngine in the engine's HTTP process): the schedulers are Ray actors
# (srt/ray/scheduler_actor.py:30-31 `@ray.remote class SchedulerActor`), created by that process
# (srt/ray/engine.py:339-355, :367-381), placed by Ray (children of a raylet, not of the HTTP
# process), each on one GPU of the engine's placement group (`num_cpus=0, num_gpus=1`,
# engine.py:206-218), and titled by Ray after the method they run
# (`ray::SchedulerActor.run_event_loop`: the `sglang::scheduler_TP<r>` title their constructor
# sets, scheduler.py:6294, is Ray's again once a method runs). Their class -> the kind of SGLang
# process each one is.
SGLANG_RAY_ACTORS: dict[str, MemberKind] = {"SchedulerActor": MemberKind.SCHEDULER}
# The name SGLang gives each (srt/ray/engine.py:209-213): the rank-0 scheduler's node, the DP, PP
# and TP ranks, the first 8 hex digits of the placement group id and the bundle index.
RAY_SCHEDULER_NAME = re.compile(
    r"sglang_scheduler_node(?P<node>.+)_dp(?P<dp>\d+)_pp(?P<pp>\d+)_tp(?P<tp>\d+)"
    r"_pg(?P<pg>[0-9a-f]+)_bundle(?P<bundle>\d+)"
)


def _add_ray_mode_schedulers(
    members: dict[tuple[str | None, int], Member],
    procs: dict[tuple[str | None, int], ProcessInfo],
    snapshot: Snapshot,
    node_of: dict[str, str],
) -> None:
    """SGLang's Ray-mode schedulers, each tied to its engine by the process that created it. Ray
    names no actor's owner, but it names its job: the job of the process that created it. Where
    the engine's HTTP process is a Ray driver of its own (SGLang started outside a Ray worker and
    connected to the cluster: `sglang serve --use-ray`, or slime's `launch_server_process` spawn
    child of its SGLangEngine actor), that job's driver is the engine's HTTP process, and every
    scheduler of the job is that engine's. A scheduler whose job's driver is no engine (SGLang run
    inside a Ray worker of slime's own job) keeps no URL: nothing Ray says ties it to one engine."""
    drivers = {
        j.job_id: (j.driver_node_ip, j.driver_pid)
        for j in snapshot.joined(RAY_STATE).jobs
        if j.job_id and j.driver_pid is not None
    }
    for a in snapshot.joined(RAY_STATE).actors:
        kind = SGLANG_RAY_ACTORS.get(a.class_name)
        if kind is None or a.pid is None or a.state != ACTOR_ALIVE:
            continue
        node = a.node_ip or node_of.get(a.node_id or "")
        if (node, a.pid) not in procs:
            hits = [n for (n, p) in procs if p == a.pid]
            node = hits[0] if len(hits) == 1 else node
        info = procs.get((node, a.pid))
        title = info.title if info else ""
        parsed = parse_ray_title(title)
        engine: Member | None = None
        driver = drivers.get(a.job_id or "")
        if driver is not None:
            engine = members.get(driver) or next(
                (m for k, m in members.items() if k[1] == driver[1] and driver[0] is None), None
            )
        if engine is not None and engine.role is not Role.SGLANG_ENGINE:
            engine = None
        members[(node, a.pid)] = Member(
            Role.SGLANG_ENGINE,
            a.pid,
            node,
            kind,
            title,
            a.actor_id,
            a.class_name,
            parsed[1] if parsed else None,
            engine_url=engine.engine_url if engine else None,
            source="ray-state",
        )


def forked_from_actor(
    key: tuple[str | None, int], procs: dict[tuple[str | None, int], ProcessInfo]
) -> bool:
    """A process below a slime actor's process: a fork (slime's router, an SGLang server, a
    DataLoader worker) keeps the actor's `ray::Class.method` title and environment, but Ray starts
    every actor as a child of its raylet, never of another actor."""
    node, seen = key[0], {key[1]}
    info = procs.get(key)
    ppid = info.ppid if info is not None else None
    while ppid is not None and ppid not in seen and len(seen) < 64:
        parent = procs.get((node, ppid))
        if parent is None:
            return False
        parsed = parse_ray_title(parent.title)
        if parsed is not None and parsed[0] in SLIME_ACTOR_CLASSES:
            return True
        seen.add(ppid)
        ppid = parent.ppid
    return False


# sgl-router's Python entry points (sglang_router/launch_router.py, router.py; the `sglang-router`
# console script and `python -m sglang_router.launch_router`)
_ROUTER_MODULE = "sglang_router"
# The folders of the routers' own Python code: sgl-router's, miles's own router
# (`--use-miles-router`: miles/router/router.py:18 `run_router`, started by multiprocessing spawn
# from miles/ray/rollout/router_manager.py:66-70@31f1ca961) and slime's January one
# (`--use-slime-router`: slime/router/router.py:17 `run_router`, forked at
# slime/ray/rollout.py:663@9bfe152)
ROUTER_CODE = (f"{_ROUTER_MODULE}/", "miles/router/", "slime/router/")


def _router_code_pids(snapshot: Snapshot) -> set[tuple[str | None, int]]:
    """Processes whose stacks run sgl-router's Python code (slime's `run_router` -> `launch_router`
    child of the RolloutManager, blocked in the router's native server)."""
    out: set[tuple[str | None, int]] = set()
    for obs in snapshot.joined(ALL_STACKS):
        for thread in obs.stack.threads:
            if any(
                code in (f.short_filename or f.filename).replace("\\", "/")
                for f in thread.frames
                if not f.native
                for code in ROUTER_CODE
            ):
                out.add((obs.node_ip, obs.pid))
                break
    return out


# the title sglang_router/launch_router.py:32 sets (setproctitle). In a fork of a Ray worker it
# does not take (Ray's own title setting moved argv: slime's router keeps `ray::RolloutManager...`,
# recorded in tests/fixtures/real/router-fork/); a router started outside Ray has it.
ROUTER_TITLE = "sglang::router"
# Every title a router gives itself: sgl-router's, and miles's own router's (miles/router/router.py:
# 25@31f1ca961 `setproctitle("miles-router")`; a spawn child is a fresh interpreter: it takes)
ROUTER_TITLES = (ROUTER_TITLE, "miles-router")


def _runs_router_command(p: ProcessInfo) -> bool:
    """A router the user runs: `python -m sglang_router.launch_router ...`, `sglang-router ...`,
    or any process with a router's own title."""
    if p.title.split(" ", 1)[0] in ROUTER_TITLES:
        return True
    head = p.cmdline[:3]
    return any(
        arg.startswith(_ROUTER_MODULE) or arg.rsplit("/", 1)[-1] == "sglang-router" for arg in head
    )


def own_listen(p: ProcessInfo, parent: ProcessInfo | None) -> ProcessInfo:
    """`p` without the listening sockets it inherited from its parent across a fork (a Ray
    worker's own gRPC port stays open in slime's forked router)."""
    if parent is None:
        return p
    addrs = tuple(a for a in p.listen_addrs if a not in parent.listen_addrs)
    ports = tuple(x for x in p.listen_ports if x not in parent.listen_ports)
    return dataclasses.replace(p, listen_addrs=addrs, listen_ports=ports)


@dataclass(frozen=True)
class _Owner:
    """The process of a slime actor that starts the router (`ROUTER_PARENTS`)."""

    node_ip: str | None
    pid: int
    actor_id: str | None
    source: MemberSource


def _router_owners(
    snapshot: Snapshot,
    procs: dict[tuple[str | None, int], ProcessInfo],
    node_of: dict[str, str],
) -> list[_Owner]:
    """The processes of the live slime actors that start routers, wherever slime places them (the
    RolloutManager, slime's next ServingCluster): from Ray state, else from their titles."""
    out: dict[tuple[str | None, int], _Owner] = {}
    for a in snapshot.joined(RAY_STATE).actors:
        if a.class_name not in ROUTER_PARENTS or a.pid is None or a.state != ACTOR_ALIVE:
            continue
        node = a.node_ip or node_of.get(a.node_id or "")
        if (node, a.pid) not in procs:
            hits = [n for (n, p) in procs if p == a.pid]
            node = hits[0] if len(hits) == 1 else node
        out.setdefault((node, a.pid), _Owner(node, a.pid, a.actor_id, "ray-state"))
    for key, p in procs.items():
        parsed = parse_ray_title(p.title)
        if key in out or parsed is None or parsed[0] not in ROUTER_PARENTS:
            continue
        if not forked_from_actor(key, procs):
            out[key] = _Owner(key[0], key[1], None, "proc-title")
    return list(out.values())


def _add_routers(
    members: dict[tuple[str | None, int], Member],
    procs: dict[tuple[str | None, int], ProcessInfo],
    router_code: set[tuple[str | None, int]],
    owners: list[_Owner],
) -> None:
    """slime's router: a child of a slime actor that starts routers (`ROUTER_PARENTS`: the
    RolloutManager, the ServingCluster) that listens on ports of its own or runs router code; and
    a router run by hand (its command line or title) or running router code, wherever it runs."""
    for rm in owners:
        for p in _descendants(rm.pid, rm.node_ip, procs):
            key = (rm.node_ip, p.pid)
            if key in members:
                continue
            own = own_listen(p, procs.get((rm.node_ip, p.ppid)) if p.ppid else None)
            listens = bool(own.listen_addrs or own.listen_ports)
            if not (listens or key in router_code or _runs_router_command(p)):
                continue
            members[key] = Member(
                Role.ROUTER,
                p.pid,
                rm.node_ip,
                MemberKind.ROUTER,
                p.title,
                rm.actor_id,
                engine_url=_router_url(own, rm.node_ip),
                parent_pid=p.ppid,
                source=rm.source,
            )
    for key, p in procs.items():
        if key in members or not (_runs_router_command(p) or key in router_code):
            continue
        members[key] = Member(
            Role.ROUTER,
            p.pid,
            key[0],
            MemberKind.ROUTER,
            p.title,
            engine_url=_router_url(p, key[0]),
            parent_pid=p.ppid,
            source="proc-title",
        )


@dataclass(frozen=True)
class KnownRouter:
    """A URL the job itself names (a router's; an external engine's: `named_engines`), and where
    that was read (in words)."""

    url: str
    origin: str
    launched_by: int | None = None  # pid of the RolloutManager that logged its launch


def launched_routers(snapshot: Snapshot) -> dict[tuple[str | None, int], list[KnownRouter]]:
    """(node, pid) of a RolloutManager -> the routers it said it launched (slime's `Router launched
    at HOST:PORT` in the head of its worker log), oldest first."""
    out: dict[tuple[str | None, int], list[KnownRouter]] = {}
    for obs in sorted(snapshot.facts(LOG_HEADS), key=lambda o: (o.sample, o.fact.stream != "err")):
        head = obs.fact
        if not head.routers:
            continue
        found = out.setdefault((obs.node_ip, head.pid), [])
        where = f" on {obs.node_ip}" if obs.node_ip else ""
        for logged in head.routers:
            url = _on_node(logged.url, obs.node_ip)
            if any(r.url == url for r in found):
                continue
            origin = (
                f"the head of the {head.stream} log of {head.class_name or 'the actor'} pid "
                f"{head.pid}{where} ({head.file or 'its Ray worker log'}): {logged.line!r}"
            )
            found.append(KnownRouter(url, origin, head.pid))
    return out


def _on_node(url: str, node_ip: str | None) -> str:
    scheme, _, rest = url.partition("://")
    host, _, port = rest.rpartition(":")
    if host in _ANY_ADDRESS:
        host = node_ip or "127.0.0.1"
    return f"{scheme}://{host}:{port}"


def _add_killed_routers(
    members: dict[tuple[str | None, int], Member],
    procs: dict[tuple[str | None, int], ProcessInfo],
    launched: dict[tuple[str | None, int], list[KnownRouter]],
) -> None:
    """A router a RolloutManager launched (its log says so) that no live router serves any more,
    paired with the RolloutManager's zombie children (a forked router that was SIGKILLed stays
    its parent's zombie until multiprocessing reaps it): oldest zombie to the oldest such launch,
    only when their numbers match (slime forks its routers first, in its constructor, one per
    model). A zombie has no socket, title or stack left: only its parent says whose it was."""
    served = {m.engine_url for m in members.values() if m.role is Role.ROUTER and m.engine_url}
    for (node, pid), found in launched.items():
        rm = members.get((node, pid))
        if rm is None or rm.role is not Role.ROLLOUT_MANAGER:
            continue
        lost = [r for r in found if r.url not in served]
        zombies = sorted(
            (
                p
                for (n, _), p in procs.items()
                if n == node
                and p.ppid == pid
                and p.status == STATUS_ZOMBIE
                and (n, p.pid) not in members
            ),
            key=lambda p: (p.create_time is None, p.create_time or 0.0, p.pid),
        )
        if not lost or len(zombies) != len(lost):
            continue
        for router, zombie in zip(lost, zombies, strict=True):
            members[(node, zombie.pid)] = Member(
                Role.ROUTER,
                zombie.pid,
                node,
                MemberKind.ROUTER,
                zombie.title,
                rm.actor_id,
                engine_url=router.url,
                parent_pid=pid,
                source="actor-log",
            )


def _add_rollout_children(
    members: dict[tuple[str | None, int], Member], procs: dict[tuple[str | None, int], ProcessInfo]
) -> None:
    """The other processes a RolloutManager forked (a process pool's workers grading rewards, as
    AReaL's reward wrapper runs them): each keeps the RolloutManager's Ray title and environment
    across the fork, and is its `child` (read with py-spy, labelled as its child), never a second
    RolloutManager. Its router (listening, or running sgl-router's code) and the zombies paired
    with a lost router are members already; a zombie has nothing left to read."""
    rms = [m for m in members.values() if m.role is Role.ROLLOUT_MANAGER]
    for rm in [m for m in rms if m.kind is MemberKind.ACTOR]:
        for p in _descendants(rm.pid, rm.node_ip, procs):
            key = (rm.node_ip, p.pid)
            if key in members or p.status == STATUS_ZOMBIE:
                continue
            members[key] = Member(
                Role.ROLLOUT_MANAGER,
                p.pid,
                rm.node_ip,
                MemberKind.CHILD,
                p.title,
                parent_pid=p.ppid,
                source=rm.source,
            )


# slime's arguments that name a router the user runs (slime then starts none: `_start_router`)
_ROUTER_IP_FLAG = "--sglang-router-ip"
_ROUTER_PORT_FLAG = "--sglang-router-port"


def argv_router(argv: tuple[str, ...]) -> str | None:
    """`http://IP:PORT` of `--sglang-router-ip IP --sglang-router-port PORT` (or `--flag=value`)
    in a command line; None without both."""
    values: dict[str, str] = {}
    for i, arg in enumerate(argv):
        flag, eq, value = arg.partition("=")
        if flag not in (_ROUTER_IP_FLAG, _ROUTER_PORT_FLAG):
            continue
        if not eq:
            if i + 1 >= len(argv):
                continue
            value = argv[i + 1]
        values[flag] = value
    ip, port = values.get(_ROUTER_IP_FLAG), values.get(_ROUTER_PORT_FLAG)
    if not ip or not port or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    host = f"[{ip}]" if ":" in ip and not ip.startswith("[") else ip
    return f"http://{host}:{int(port)}"


def given_routers(
    members: list[Member],
    procs: dict[tuple[str | None, int], ProcessInfo],
    snapshot: Snapshot,
) -> list[KnownRouter]:
    """Routers the user gave the job (`--sglang-router-ip/--sglang-router-port` on the driver's
    command line or in a running job's entrypoint)."""
    out: list[KnownRouter] = []
    for m in members:
        info = procs.get((m.node_ip, m.pid))
        if m.role is not Role.DRIVER or info is None:
            continue
        url = argv_router(info.cmdline)
        if url is not None:
            out.append(KnownRouter(url, f"on the driver's command line (pid {m.pid})"))
    for job, argv in running_entrypoints(snapshot):
        url = argv_router(argv)
        if url is not None:
            out.append(KnownRouter(url, f"in job {job.job_id or '?'}'s entrypoint"))
    return out


# slime's argument naming the engines a job runs against without starting them (external engines:
# slime/utils/arguments.py `--rollout-external-engine-addrs HOST:PORT [HOST:PORT ...]`, nargs="+";
# `_allocate_rollout_engine_addr_and_ports_external` in slime/ray/rollout.py splits each on ":")
_EXTERNAL_ENGINES_FLAG = "--rollout-external-engine-addrs"


def argv_external_engines(argv: tuple[str, ...]) -> list[str]:
    """`http://HOST:PORT` of each address of `--rollout-external-engine-addrs A [B ...]` (or
    `--flag=A`) in a command line."""
    out: list[str] = []
    for i, arg in enumerate(argv):
        flag, eq, value = arg.partition("=")
        if flag != _EXTERNAL_ENGINES_FLAG:
            continue
        values = [value] if eq else []
        if not eq:
            for following in argv[i + 1 :]:
                if following.startswith("-"):
                    break
                values.append(following)
        for address in values:
            host, _, port = address.strip().removeprefix("http://").rstrip("/").rpartition(":")
            if host and port.isdigit() and 0 < int(port) < 65536:
                out.append(f"http://{host}:{int(port)}")
    return out


def named_engines(
    members: list[Member],
    procs: dict[tuple[str | None, int], ProcessInfo],
    snapshot: Snapshot,
) -> list[KnownRouter]:
    """Engines the job's own arguments name (`--rollout-external-engine-addrs` on the driver's
    command line or in a running job's entrypoint): the job's, though no process of it serves
    them."""
    out: list[KnownRouter] = []
    for m in members:
        info = procs.get((m.node_ip, m.pid))
        if m.role is not Role.DRIVER or info is None:
            continue
        for url in argv_external_engines(info.cmdline):
            out.append(KnownRouter(url, f"on the driver's command line (pid {m.pid})"))
    for job, argv in running_entrypoints(snapshot):
        for url in argv_external_engines(argv):
            out.append(KnownRouter(url, f"in job {job.job_id or '?'}'s entrypoint"))
    return out


def running_entrypoints(snapshot: Snapshot) -> list[tuple[RayJob, tuple[str, ...]]]:
    """Each running Ray job with its entrypoint split as a shell would (on whitespace where the
    text is not valid shell)."""
    out: list[tuple[RayJob, tuple[str, ...]]] = []
    for job in snapshot.joined(RAY_STATE).jobs:
        if job.status != JOB_RUNNING or not job.entrypoint:
            continue
        try:
            out.append((job, tuple(shlex.split(job.entrypoint))))
        except ValueError:
            out.append((job, tuple(job.entrypoint.split())))
    return out


def _add_drivers(
    members: dict[tuple[str | None, int], Member],
    procs: dict[tuple[str | None, int], ProcessInfo],
    snapshot: Snapshot,
) -> None:
    doctor = snapshot.manifest.target.get("doctor_pid")
    for job in snapshot.joined(RAY_STATE).jobs:
        if job.status != JOB_RUNNING or job.driver_pid is None or job.driver_pid == doctor:
            continue
        node = job.driver_node_ip
        key = (node, job.driver_pid)
        if key not in procs:
            hits = [k for k in procs if k[1] == job.driver_pid]
            key = hits[0] if len(hits) == 1 else key
        info = procs.get(key)
        if key in members and members[key].role is Role.SGLANG_ENGINE:
            # SGLang's Ray mode: the engine's HTTP process calls Ray itself (its own job's driver,
            # see _add_ray_mode_schedulers): it stays the engine's server
            continue
        members[key] = Member(
            Role.DRIVER,
            job.driver_pid,
            key[0],
            MemberKind.DRIVER,
            info.title if info else (job.entrypoint or ""),
            source="job-api",
        )
    if any(m.role is Role.DRIVER for m in members.values()):
        return
    for key, p in procs.items():
        if key in members or p.title.startswith(("ray::", "sglang::")):
            continue
        if any(arg.endswith(DRIVER_SCRIPTS) for arg in p.cmdline[1:3]):
            members[key] = Member(
                Role.DRIVER, p.pid, key[0], MemberKind.DRIVER, p.title, source="proc-title"
            )


def _add_distributed_ranks(
    members: dict[tuple[str | None, int], Member], procs: dict[tuple[str | None, int], ProcessInfo]
) -> None:
    """torch.distributed ranks outside Ray (RANK and WORLD_SIZE in their environment) count as train
    ranks; a descendant of a train rank that inherited them (a DataLoader worker, an uploader the
    checkpoint is streamed to) does not: ranks are siblings under their launcher, never nested."""
    for key, p in procs.items():
        if key in members or "RANK" not in p.env or "WORLD_SIZE" not in p.env:
            continue
        if _under_a_train_rank(key, members, procs):
            continue
        members[key] = Member(
            Role.TRAIN_RANK, p.pid, key[0], MemberKind.PROCESS, p.title, source="env"
        )


def _under_a_train_rank(
    key: tuple[str | None, int],
    members: dict[tuple[str | None, int], Member],
    procs: dict[tuple[str | None, int], ProcessInfo],
) -> bool:
    return _train_rank_above(key, members, procs) is not None


def _train_rank_above(
    key: tuple[str | None, int],
    members: dict[tuple[str | None, int], Member],
    procs: dict[tuple[str | None, int], ProcessInfo],
) -> Member | None:
    """The nearest ancestor of process `key` that is a train rank (an actor or a process), if any."""
    node, seen = key[0], {key[1]}
    info = procs.get(key)
    ppid = info.ppid if info is not None else None
    while ppid is not None and ppid not in seen and len(seen) < 64:
        parent = members.get((node, ppid))
        if parent is not None and parent.role is Role.TRAIN_RANK and parent.kind in _OWN_PROCESS:
            return parent
        seen.add(ppid)
        info = procs.get((node, ppid))
        ppid = info.ppid if info is not None else None
    return None


def _assign_ranks(
    members: list[Member], procs: dict[tuple[str | None, int], ProcessInfo]
) -> list[Member]:
    """Rank numbers from RANK in the environment, else guessed in process order. A process forked
    by a train rank (an async checkpoint writer, a DataLoader worker, an uploader) keeps the rank's
    Ray process title and environment: it is that rank's child (kind `child`, the rank's number,
    `parent_pid` the rank), never a rank of its own."""
    by_key = {(m.node_ip, m.pid): m for m in members}
    parent_of = {
        (m.node_ip, m.pid): above
        for m in members
        if m.role is Role.TRAIN_RANK
        and m.kind in _OWN_PROCESS
        and (above := _train_rank_above((m.node_ip, m.pid), by_key, procs)) is not None
    }
    ranks = [
        m
        for m in members
        if m.role is Role.TRAIN_RANK
        and m.kind in _OWN_PROCESS
        and (m.node_ip, m.pid) not in parent_of
    ]
    # keyed by (node, pid): the same pid on two nodes is two processes (issue 46)
    known: dict[tuple[str | None, int], int] = {}
    for m in ranks:
        info = procs.get((m.node_ip, m.pid))
        raw = info.env.get("RANK") if info else None
        if raw is not None and raw.isdigit():
            known[(m.node_ip, m.pid)] = int(raw)
    unknown = sorted(
        (m for m in ranks if (m.node_ip, m.pid) not in known),
        key=lambda m: (m.node_ip or "", m.pid),
    )
    taken = set(known.values())
    free = iter(r for r in range(len(ranks)) if r not in taken)
    out: list[Member] = []
    guessed = {(m.node_ip, m.pid): next(free, None) for m in unknown}
    assigned: dict[tuple[str | None, int], Member] = {}
    is_rank = {id(m) for m in ranks}
    for m in members:
        if id(m) not in is_rank:
            out.append(m)
            continue
        key = (m.node_ip, m.pid)
        if key in known:
            done = _replace(m, rank=known[key])
        else:
            done = _replace(m, rank=guessed.get(key), rank_inferred=True)
        assigned[(m.node_ip, m.pid)] = done
        out.append(done)
    for i, m in enumerate(out):
        above = parent_of.get((m.node_ip, m.pid))
        if above is None:
            continue
        hops = 0
        while (above.node_ip, above.pid) in parent_of and hops < 64:  # a grandchild: the rank
            above, hops = parent_of[(above.node_ip, above.pid)], hops + 1
        rank = assigned.get((above.node_ip, above.pid), above)
        out[i] = _replace(
            m,
            kind=MemberKind.CHILD,
            rank=rank.rank,
            rank_inferred=rank.rank_inferred,
            parent_pid=rank.pid,
            actor_id=None,
        )
    return out


_ANY_ADDRESS = ("0.0.0.0", "::", "[::]", "")


def _logged_urls(snapshot: Snapshot) -> dict[tuple[str | None, int], tuple[str, str]]:
    """(node, pid) of an engine actor -> the URL its server said it listens on (SGLang's uvicorn
    line in the head of the actor's worker log) and where that was read, in words."""
    out: dict[tuple[str | None, int], tuple[str, str]] = {}
    for obs in sorted(snapshot.facts(LOG_HEADS), key=lambda o: (o.sample, o.fact.stream != "err")):
        # the URL its server said it listens on, else the one slime launched it at (a server that
        # never listened: its start-up hangs, or it died before it bound its port)
        served = obs.fact.served_url or obs.fact.launched_url
        if served is None or (obs.node_ip, obs.fact.pid) in out:
            continue
        scheme, _, rest = served.url.partition("://")
        host, _, port = rest.rpartition(":")
        if host in _ANY_ADDRESS:
            host = obs.node_ip or "127.0.0.1"
        where = f" on {obs.node_ip}" if obs.node_ip else ""
        origin = (
            f"the head of the {obs.fact.stream} log of {obs.fact.class_name or 'the actor'} pid "
            f"{obs.fact.pid}{where} ({obs.fact.file or 'its Ray worker log'}): {served.line!r}"
        )
        out[(obs.node_ip, obs.fact.pid)] = (f"{scheme}://{host}:{port}", origin)
    return out


def _add_logged_urls(
    members: dict[tuple[str | None, int], Member],
    logged: dict[tuple[str | None, int], tuple[str, str]],
) -> None:
    """An engine actor with no listening child gets the URL its log names (its server is gone, or
    never listened), and so do its engine's processes that have none (its schedulers)."""
    for key, (url, _origin) in logged.items():
        m = members.get(key)
        if (
            m is not None
            and m.role is Role.SGLANG_ENGINE
            and m.kind is MemberKind.ACTOR
            and not m.engine_url
        ):
            members[key] = _replace(m, engine_url=url)
            for other_key, other in list(members.items()):
                if (
                    other.role is Role.SGLANG_ENGINE
                    and other.actor_id
                    and other.actor_id == m.actor_id
                    and not other.engine_url
                ):
                    members[other_key] = _replace(other, engine_url=url)


def _engines(
    members: list[Member],
    snapshot: Snapshot,
    logged: dict[tuple[str | None, int], tuple[str, str]] | None = None,
    procs: dict[tuple[str | None, int], ProcessInfo] | None = None,
    launchers: frozenset[str] = frozenset(),
) -> tuple[Engine, ...]:
    """The engines to probe. `launchers`: the URLs of multi-node engines' node launchers (SGLang's
    dummy health servers, `_join_engine_nodes`): no engine, whoever else names them."""
    engines: dict[str, Engine] = {}
    for m in members:
        if m.role is Role.SGLANG_ENGINE and m.kind is MemberKind.HTTP_SERVER and m.engine_url:
            actor = next(
                (
                    a
                    for a in members
                    if a.kind is MemberKind.ACTOR and a.actor_id and a.actor_id == m.actor_id
                ),
                None,
            )
            engines.setdefault(
                m.engine_url,
                Engine(m.engine_url, m.node_ip, actor.pid if actor else None, m.pid, "proc-listen"),
            )
    served = {m.engine_url for m in members if m.kind is MemberKind.HTTP_SERVER}
    for m in members:  # an engine actor whose URL only its log names: its server is gone
        url, origin = (logged or {}).get((m.node_ip, m.pid), (None, ""))
        if (
            m.kind is MemberKind.ACTOR
            and url is not None
            and m.engine_url == url
            and url not in served
        ):
            engines.setdefault(url, Engine(url, m.node_ip, m.pid, None, "actor-log", origin))
    given = snapshot.manifest.target.get("sglang_urls")
    for url in given if isinstance(given, list) else ():
        engines.setdefault(str(url), Engine(str(url), None, None, None, "user-flag"))
    for known in named_engines(members, procs or {}, snapshot):
        engines.setdefault(known.url, Engine(known.url, None, None, None, "job-args", known.origin))
    for obs in snapshot.joined(HTTP_ANSWERS):
        if isinstance(obs.parsed, RouterWorkers):
            for url in obs.parsed.urls:
                engines.setdefault(
                    url.rstrip("/"), Engine(url.rstrip("/"), None, None, None, "router")
                )
    for obs in snapshot.joined(
        HTTP_ANSWERS
    ):  # an engine that answered earlier in this run is probed again
        if obs.kind is HttpPeer.ENGINE:
            url = obs.answer.url.rstrip("/")
            engines.setdefault(url, Engine(url, None, None, None, "earlier-answer"))
    return tuple(e for e in engines.values() if e.url not in launchers)


_ANY_HOST = ("127.0.0.1", "localhost", "0.0.0.0", "[::1]", "[::]")


def _host(url: str) -> str:
    return url.partition("://")[2].rpartition(":")[0]


def _pair_lost_servers(
    members: list[Member], engines: tuple[Engine, ...]
) -> tuple[list[Member], tuple[Engine, ...]]:
    """An engine URL that no process serves (learned from the router, an earlier answer or the
    user) and an SGLangEngine actor with no server among its children, on the same node: that
    actor's server is gone. Paired only when the node leaves no choice (one of each); with several,
    where the node has at least as many such actors as such URLs, each URL is marked
    `lost_server` (one of those actors' servers, which one unknown)."""
    served = {m.engine_url for m in members if m.engine_url and m.kind is MemberKind.HTTP_SERVER}
    lost = [
        e for e in engines if e.server_pid is None and e.actor_pid is None and e.url not in served
    ]
    bare = [
        m
        for m in members
        if m.role is Role.SGLANG_ENGINE and m.kind is MemberKind.ACTOR and m.engine_url is None
    ]
    pairs: dict[str, Member] = {}
    grouped: dict[str, str | None] = {}  # URL -> its node, where no one-to-one pairing is known
    for node in {m.node_ip for m in bare}:
        here = [m for m in bare if m.node_ip == node]
        urls = [e for e in lost if _host(e.url) == node or _host(e.url) in _ANY_HOST]
        if len(here) == 1 and len(urls) == 1 and urls[0].url not in pairs:
            pairs[urls[0].url] = here[0]
        elif urls and len(here) >= len(urls):
            grouped.update((e.url, node) for e in urls if e.url not in pairs)
    if not pairs and not grouped:
        return members, engines
    by_pid = {id(m): url for url, m in pairs.items()}
    out = [_replace(m, engine_url=by_pid[id(m)]) if id(m) in by_pid else m for m in members]
    paired = tuple(
        dataclasses.replace(e, node_ip=pairs[e.url].node_ip, actor_pid=pairs[e.url].pid)
        if e.url in pairs
        else dataclasses.replace(e, node_ip=grouped[e.url], lost_server=True)
        if e.url in grouped
        else e
        for e in engines
    )
    return out, paired


def _replace(m: Member, **changes: object) -> Member:
    return dataclasses.replace(m, **changes)  # type: ignore[arg-type]
