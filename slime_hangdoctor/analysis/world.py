"""Everything known about each process, joined across sources (stacks, /proc, NVML, RAS, FR, Ray).

`build_world` is the one place that resolves identities: which pid is which train rank, which GPU a
process drives, which role a process plays when the topology could not say (e.g. plain torchrun
processes without Ray: a process that holds a GPU and speaks NCCL is taken for a train rank).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping, Set
from dataclasses import dataclass
from typing import Literal, TypeVar

from slime_hangdoctor.analysis.readers.nvml import GpuRead, gpu_of_pid, read_gpus
from slime_hangdoctor.analysis.readers.pyspy import ProcessRead, Reads, ThreadRead, read_process
from slime_hangdoctor.analysis.signatures import Block, split_name
from slime_hangdoctor.analysis.source import Source
from slime_hangdoctor.facts import Frame
from slime_hangdoctor.parsers.flight_recorder import SPEC as FLIGHT_RECORDER
from slime_hangdoctor.parsers.nccl_ras import SPEC as RAS
from slime_hangdoctor.parsers.processes import SPEC as PROCESS_TABLE
from slime_hangdoctor.parsers.processes import STATUS_GONE, ProcessInfo
from slime_hangdoctor.parsers.pyspy import ALL_STACKS, StackObs, StackVia
from slime_hangdoctor.parsers.ray_state import (
    ACTOR_CREATION_TASK,
    RAY_STATE,
    TASK_ENDED,
    TASK_RUNNING_ANY,
    RayTask,
)
from slime_hangdoctor.parsers.sglang import HTTP_ANSWERS
from slime_hangdoctor.parsers.sockets import SPEC as SOCKETS
from slime_hangdoctor.parsers.sockets import TcpConnection
from slime_hangdoctor.snapshot import Snapshot
from slime_hangdoctor.topology import CLASS_ROLES, Member, MemberKind, Topology, parse_ray_title
from slime_hangdoctor.verdict import Role

T = TypeVar("T")

# where a train rank's number was read: the topology, RANK in its environment, the flight
# recorder's or NCCL RAS's pid, or guessed from the process order
RankSource = Literal["topology", "env", "flight_recorder", "ras", "inferred"]

PROCESSES = Source("processes")  # the process table (psutil / procfs)
CPU = Source("cpu")  # CPU time of the slime processes between the samples


@dataclass(frozen=True)
class Proc:
    """One process of the job, with every reading of it."""

    pid: int
    node_ip: str | None
    role: Role | None
    member: Member | None
    title: str
    rank: int | None
    reads: tuple[ProcessRead, ...]  # one per sample, oldest first
    infos: tuple[tuple[int, ProcessInfo], ...]  # (sample, info), oldest first
    gpu: GpuRead | None
    rank_source: RankSource | None = None
    gone: bool = False  # seen in an earlier /proc sample, missing from its node's last one
    # (sample, connections) where the node's sockets were read, oldest first
    conns: tuple[tuple[int, tuple[TcpConnection, ...]], ...] = ()

    @property
    def latest(self) -> ProcessRead | None:
        return self.reads[-1] if self.reads else None

    @property
    def first(self) -> ProcessRead | None:
        return self.reads[0] if self.reads else None

    @property
    def two_reads(self) -> tuple[ProcessRead, ProcessRead] | None:
        """Its first and last stack reads where they come from two samples; None where it was
        read at one sample or none (nothing to compare)."""
        if len(self.reads) < 2 or self.reads[0].sample == self.reads[-1].sample:
            return None
        return self.reads[0], self.reads[-1]

    @property
    def kind(self) -> MemberKind:
        return self.member.kind if self.member else MemberKind.PROCESS

    @property
    def engine_url(self) -> str | None:
        return self.member.engine_url if self.member else None

    @property
    def actor_id(self) -> str | None:
        return self.member.actor_id if self.member else None

    @property
    def is_child(self) -> bool:
        """A process forked by a slime process that kept its title (`Member.kind` "child")."""
        return self.kind is MemberKind.CHILD

    @property
    def parent_pid(self) -> int | None:
        return self.member.parent_pid if self.member else None

    @property
    def label(self) -> str:
        if self.role is Role.TRAIN_RANK and self.rank is not None:
            if self.is_child:
                return f"train rank {self.rank} child (pid {self.pid})"
            return f"train rank {self.rank}"
        if self.member is not None:
            return self.member.label
        if self.role is not None:
            return str(self.role.value).replace("_", " ")
        return f"pid {self.pid}"

    @property
    def cpu_delta(self) -> float | None:
        """CPU seconds used between the first and the last /proc sample."""
        vals = [(s, i.cpu_seconds) for s, i in self.infos if i.cpu_seconds is not None]
        if len(vals) < 2 or vals[0][0] == vals[-1][0]:
            return None
        return max(0.0, (vals[-1][1] or 0.0) - (vals[0][1] or 0.0))

    @property
    def dead(self) -> bool:
        """Gone from the last /proc sample of its node, or a zombie there."""
        return self.gone or (bool(self.infos) and self.infos[-1][1].status in STATUS_GONE)


@dataclass(frozen=True)
class World:
    snapshot: Snapshot
    topology: Topology
    procs: tuple[Proc, ...]
    gpus: tuple[GpuRead, ...]
    samples: tuple[int, ...]  # stack/process samples seen, ascending

    @property
    def two_samples(self) -> bool:
        return len(self.samples) >= 2

    def by_role(self, role: Role) -> tuple[Proc, ...]:
        return tuple(p for p in self.procs if p.role is role)

    def train_ranks(self) -> tuple[Proc, ...]:
        """The train ranks themselves: not the processes they forked (`Proc.is_child`)."""
        return tuple(p for p in self.by_role(Role.TRAIN_RANK) if not p.is_child)

    def children_of(self, proc: Proc) -> tuple[Proc, ...]:
        """The processes `proc` forked that kept its title (its `child` members)."""
        return self.memo("children", self._children).get((proc.node_ip, proc.pid), ())

    def _children(self) -> dict[tuple[str | None, int], tuple[Proc, ...]]:
        """Every `child` member by its parent's (node, pid), in `procs` order: one pass, so that
        asking for each process's children stays linear in the job's size (issue 46)."""
        found: dict[tuple[str | None, int], list[Proc]] = {}
        for p in self.procs:
            if p.is_child and p.parent_pid is not None:
                found.setdefault((p.node_ip, p.parent_pid), []).append(p)
        return {key: tuple(group) for key, group in found.items()}

    def parent_of(self, proc: Proc) -> Proc | None:
        """The slime process a `child` was forked by."""
        if not proc.is_child or proc.parent_pid is None:
            return None
        return next(
            (p for p in self.procs if p.pid == proc.parent_pid and p.node_ip == proc.node_ip), None
        )

    def find(self, pid: int | None, node_ip: str | None = None) -> Proc | None:
        if pid is None:
            return None
        hits = [p for p in self.procs if p.pid == pid]
        if node_ip is not None and len(hits) > 1:
            hits = [p for p in hits if p.node_ip in (None, node_ip)] or hits
        return hits[0] if hits else None

    def memo(self, key: str, compute: Callable[[], T]) -> T:
        """`compute()`, once per world: a derived view that several hooks of a part read."""
        cache: dict[str, object] = self.__dict__.setdefault("_memo", {})
        if key not in cache:
            cache[key] = compute()
        return cache[key]  # type: ignore[return-value]

    def train_rank(self, rank: int) -> Proc | None:
        for p in self.train_ranks():
            if p.rank == rank:
                return p
        return None

    def returned(self, p: Proc) -> str | None:
        """Why `p` has returned and will never come, or None: a slime Ray actor that runs no
        method (no task of it running in Ray's task list, nor in its process title) and whose
        main thread is an idle Ray worker in every stack read of it (py-spy: `main_loop`,
        ray/_private/worker.py). A peer that returned is not "elsewhere": whoever waits on it
        waits on a path it did not take. Without a stack of it, nothing says so. Only a train
        rank or a rollout manager does the job's work in its own methods: an engine's actor
        idles while its server and schedulers serve (or hold) the requests."""
        if p.role not in (Role.TRAIN_RANK, Role.ROLLOUT_MANAGER) or p.kind is not MemberKind.ACTOR:
            return None
        if not p.reads or (p.member is not None and p.member.method):
            return None
        if any(r.block is not Block.IDLE_WORKER for r in p.reads):
            return None
        mine = self._tasks_of(p.actor_id)
        if any(
            t.state in TASK_RUNNING_ANY
            for t in self.snapshot.joined(RAY_STATE).tasks
            if t.actor_id == p.actor_id
        ):
            return None
        ended = [t for t in mine if t.state in TASK_ENDED and t.task_type != ACTOR_CREATION_TASK]
        last = max(ended, key=lambda t: t.end_time_ms or 0, default=None)
        if last is None:
            return f"{p.label} runs no Ray method: its worker is idle (no method running)"
        return (
            f"{p.label} returned: its Ray task {last.method} {last.state} and its worker is idle "
            "(no method running)"
        )

    def _tasks_of(self, actor_id: str | None) -> list[RayTask]:
        if actor_id is None:
            return []
        seen: dict[str, RayTask] = {}
        for page in sorted(
            self.snapshot.joined(RAY_STATE).task_pages, key=lambda q: (q.sample, q.time)
        ):
            for t in page.tasks:
                if t.actor_id == actor_id:
                    seen[t.task_id] = t
        return list(seen.values())


def _best_stacks(snapshot: Snapshot) -> dict[tuple[str | None, int], list[StackObs]]:
    """Per process, one stack per sample: py-spy over the dashboard traceback, native over plain."""
    chosen: dict[tuple[str | None, int, int], StackObs] = {}
    for obs in snapshot.joined(ALL_STACKS):
        key = (obs.node_ip, obs.pid, obs.sample)
        prev = chosen.get(key)
        if prev is None or _stack_rank(obs) > _stack_rank(prev):
            chosen[key] = obs
    out: dict[tuple[str | None, int], list[StackObs]] = {}
    for (node, pid, _), obs in sorted(chosen.items(), key=lambda kv: kv[0][2]):
        out.setdefault((node, pid), []).append(obs)
    return out


def _stack_rank(obs: StackObs) -> tuple[int, int, int]:
    frames = sum(len(t.frames) for t in obs.stack.threads)
    return (1 if obs.via is StackVia.PYSPY else 0, 1 if obs.stack.native else 0, frames)


def _infos(snapshot: Snapshot) -> dict[tuple[str | None, int], list[tuple[int, ProcessInfo]]]:
    out: dict[tuple[str | None, int], list[tuple[int, ProcessInfo]]] = {}
    for obs in sorted(snapshot.facts(PROCESS_TABLE), key=lambda o: o.sample):
        for p in obs.fact:
            out.setdefault((obs.node_ip, p.pid), []).append((obs.sample, p))
    return out


def _conns(
    snapshot: Snapshot,
) -> dict[tuple[str | None, int], list[tuple[int, tuple[TcpConnection, ...]]]]:
    """Per process, its TCP connections at each sample where its node's sockets were read (an
    empty tuple: read, and it held none)."""
    seen: dict[tuple[str | None, int], set[int]] = {}
    for pobs in snapshot.facts(PROCESS_TABLE):
        for p in pobs.fact:
            seen.setdefault((pobs.node_ip, pobs.sample), set()).add(p.pid)
    out: dict[tuple[str | None, int], list[tuple[int, tuple[TcpConnection, ...]]]] = {}
    for obs in sorted(snapshot.facts(SOCKETS), key=lambda o: o.sample):
        by_pid: dict[int, list[TcpConnection]] = {}
        for c in obs.fact:
            by_pid.setdefault(c.pid, []).append(c)
        for pid in seen.get((obs.node_ip, obs.sample), set()) | set(by_pid):
            out.setdefault((obs.node_ip, pid), []).append((obs.sample, tuple(by_pid.get(pid, ()))))
    return out


def _fr_ranks(snapshot: Snapshot) -> dict[int, int]:
    """pid -> global rank from flight-recorder dumps that carry their pid."""
    return {
        f.fact.pid: f.fact.rank for f in snapshot.facts(FLIGHT_RECORDER) if f.fact.pid is not None
    }


def _ras_ranks(snapshot: Snapshot) -> dict[int, int]:
    """pid -> rank in the largest NCCL communicator RAS reported (the world group, usually)."""
    best: dict[int, int] = {}
    size = -1
    for obs in snapshot.facts(RAS):
        for comm in obs.fact.communicators:
            n = comm.size or len(comm.ranks)
            if n > size:
                size = n
                best = {r.pid: r.rank for r in comm.ranks if r.pid is not None}
    return best


def _ras_pids(snapshot: Snapshot) -> set[int]:
    return {
        r.pid
        for obs in snapshot.facts(RAS)
        for c in obs.fact.communicators
        for r in c.ranks
        if r.pid is not None
    }


def _job_process(
    info: ProcessInfo,
    key: tuple[str | None, int],
    nccl_pids: set[int],
    gpus: tuple[GpuRead, ...],
    have_members: bool,
) -> bool:
    """A /proc entry the topology did not name but that belongs to the job (bare torch ranks)."""
    if key[1] in nccl_pids or "RANK" in info.env:
        return True
    title = info.title
    parsed = parse_ray_title(title)
    if (parsed is not None and parsed[0] in CLASS_ROLES) or title.startswith("sglang::"):
        return True
    return not have_members and gpu_of_pid(gpus, key[1], key[0]) is not None


def _guess_role(
    title: str,
    reads: list[ProcessRead],
    pid: int,
    nccl_pids: set[int],
    gpu: GpuRead | None,
    info: ProcessInfo | None,
) -> Role | None:
    parsed = parse_ray_title(title)
    if parsed is not None and parsed[0] in CLASS_ROLES:
        return CLASS_ROLES[parsed[0]]
    if title.startswith("sglang::"):
        return Role.SGLANG_ENGINE
    if pid in nccl_pids or (info is not None and "RANK" in info.env):
        return Role.TRAIN_RANK
    for r in reads:
        stage_sig = r.primary.stage_sig
        if stage_sig is not None and stage_sig.file and stage_sig.file.startswith("sglang/"):
            return Role.SGLANG_ENGINE
        if r.primary.in_collective:
            return Role.TRAIN_RANK
    if gpu is not None and reads:
        return Role.TRAIN_RANK
    return None


def _rank_of(
    member: Member | None,
    info: ProcessInfo | None,
    pid: int,
    fr: dict[int, int],
    ras: dict[int, int],
) -> tuple[int | None, RankSource | None]:
    if member is not None and member.rank is not None and not member.rank_inferred:
        return member.rank, "topology"
    env = info.env.get("RANK") if info is not None else None
    if env is not None and env.isdigit():
        return int(env), "env"
    if pid in fr:
        return fr[pid], "flight_recorder"
    if pid in ras:
        return ras[pid], "ras"
    if member is not None and member.rank is not None:
        return member.rank, "inferred"
    return None, None


def build_world(snapshot: Snapshot, topology: Topology) -> World:
    gpus = read_gpus(snapshot)
    stacks = _best_stacks(snapshot)
    infos = _infos(snapshot)
    conns = _conns(snapshot)
    fr = _fr_ranks(snapshot)
    ras = _ras_ranks(snapshot)
    nccl_pids = _ras_pids(snapshot) | set(fr)
    keys: dict[tuple[str | None, int], None] = {}
    nodes_of: dict[int, set[str | None]] = {}  # pid -> the nodes of `keys` with it (an index)

    def add(key: tuple[str | None, int]) -> None:
        keys.setdefault(key, None)
        nodes_of.setdefault(key[1], set()).add(key[0])

    for m in topology.members:
        add((m.node_ip, m.pid))
    for key in stacks:
        seen = nodes_of.get(key[1])
        if not seen or (key[0] is not None and None not in seen):
            add(key)
    for key, info_list in infos.items():
        seen = nodes_of.get(key[1], set())
        known = None in seen or key[0] in seen
        if not known and _job_process(
            info_list[-1][1], key, nccl_pids, gpus, bool(topology.members)
        ):
            add(key)
    last_sample: dict[str | None, int] = {}
    for pobs in snapshot.facts(PROCESS_TABLE):
        last_sample[pobs.node_ip] = max(last_sample.get(pobs.node_ip, -1), pobs.sample)
    procs: list[Proc] = []
    stacks_read: Reads = {}  # each distinct stack read once (readers/pyspy.py read_thread)
    for node, pid in keys:
        member = topology.member(pid, node)
        node_ip = node or (member.node_ip if member else None)
        obs = stacks.get((node_ip, pid)) or pid_entry(stacks, pid)
        reads = [r for r in (read_process(o, stacks_read) for o in obs) if r is not None]
        info_list = infos.get((node_ip, pid)) or pid_entry(infos, pid)
        gone = bool(info_list) and info_list[-1][0] < last_sample.get(node_ip, -1)
        last_info = info_list[-1][1] if info_list else None
        title = (
            (member.title if member and member.title else "")
            or (last_info.title if last_info else "")
            or next((r.title for r in reads if r.title), "")
            or ""
        )
        gpu = gpu_of_pid(gpus, pid, node_ip)
        role = member.role if member else _guess_role(title, reads, pid, nccl_pids, gpu, last_info)
        rank, rank_source = (None, None)
        if role is Role.TRAIN_RANK:
            rank, rank_source = _rank_of(member, last_info, pid, fr, ras)
        procs.append(
            Proc(
                pid=pid,
                node_ip=node_ip,
                role=role,
                member=member,
                title=title,
                rank=rank,
                reads=tuple(reads),
                infos=tuple(info_list),
                gpu=gpu,
                rank_source=rank_source,
                gone=gone,
                conns=tuple(conns.get((node_ip, pid)) or pid_entry(conns, pid)),
            )
        )
    procs = _children_ranked(procs)
    samples = sorted(
        {s.sample for s in snapshot.joined(ALL_STACKS)}
        | {p.sample for p in snapshot.facts(PROCESS_TABLE)}
        | {h.sample for h in snapshot.joined(HTTP_ANSWERS)}
        | {r.sample for r in snapshot.facts(RAS)}
    )
    return World(snapshot, topology, tuple(procs), gpus, tuple(samples))


def _children_ranked(procs: list[Proc]) -> list[Proc]:
    """A rank's child carries the rank of its parent as the world resolved it."""
    by_key = {(p.node_ip, p.pid): p for p in procs}
    out: list[Proc] = []
    for p in procs:
        parent = by_key.get((p.node_ip, p.parent_pid)) if p.is_child and p.parent_pid else None
        if parent is not None and parent.rank is not None:
            out.append(dataclasses.replace(p, rank=parent.rank, rank_source=parent.rank_source))
        else:
            out.append(p)
    return out


def pid_entry(table: Mapping[tuple[str | None, int], list[T]], pid: int) -> list[T]:
    """A pid's entry when the node is unknown on one side (only if the pid is unambiguous)."""
    hits = [v for (_, p), v in table.items() if p == pid]
    return hits[0] if len(hits) == 1 else []


# --------------------------------------------------------------------------- threads by frame


def _threads(procs: tuple[Proc, ...]) -> Iterator[tuple[Proc, ThreadRead]]:
    for p in procs:
        if p.latest is not None:
            for t in p.latest.threads:
                yield p, t


def _funcs(t: ThreadRead) -> set[str]:
    return {split_name(f.name)[1] for f in t.own}


def _in_file(frame: Frame, part: str) -> bool:
    return part in frame.filename.replace("\\", "/") or part in (frame.short_filename or "")


def threads_with(
    procs: tuple[Proc, ...], funcs: Set[str] | None = None, file_part: str | None = None
) -> list[tuple[Proc, ThreadRead]]:
    """The threads of the processes' last stacks with one of `funcs` among their own frames (and a
    frame in a file whose path holds `file_part`): what a known cause matches on."""
    out: list[tuple[Proc, ThreadRead]] = []
    for p, t in _threads(procs):
        if funcs is not None and not (funcs & _funcs(t)):
            continue
        if file_part is not None and not any(_in_file(f, file_part) for f in t.own):
            continue
        out.append((p, t))
    return out


def who(hits: list[tuple[Proc, ThreadRead]]) -> str:
    """The processes of `hits`, named once each (at most four)."""
    return ", ".join(dict.fromkeys(f"{p.label} (pid {p.pid})" for p, _ in hits[:4]))


def children_read(world: World, p: Proc) -> list[Proc]:
    """The processes `p` forked whose stacks were read (a rank's checkpoint writer), at most 2."""
    return [c for c in world.children_of(p) if c.latest is not None][:2]


def children_text(world: World, p: Proc) -> str:
    """Where the processes `p` forked wait (a rank waiting for its checkpoint writer): read by the
    stacks part and the chain part alike."""
    return "".join(
        f"; its child {c.label} is {c.latest.describe() if c.latest else 'no stack'}"
        for c in children_read(world, p)
    )
