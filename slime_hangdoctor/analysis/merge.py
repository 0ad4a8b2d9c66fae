"""Join suspects that name the same process (pid), engine (url), rank or GPU into one `Merged`
candidate; its score sums the best weight of each source that names it."""

from __future__ import annotations

from dataclasses import dataclass, field

from slime_hangdoctor.analysis.readers.nvml import gpu_by_index
from slime_hangdoctor.analysis.signatures import Block
from slime_hangdoctor.analysis.source import Source
from slime_hangdoctor.analysis.source_analysis import Suspect
from slime_hangdoctor.analysis.world import Proc, World
from slime_hangdoctor.topology import MemberKind, scheduler_tp_rank
from slime_hangdoctor.verdict import Culprit, Role, Stage


@dataclass
class Merged:
    role: Role
    suspects: list[Suspect] = field(default_factory=list)
    # the process of a role of several processes whose own state is the evidence, where every
    # suspect's pid only stands for its engine (`holder`); None: the suspects' pid is it
    holder: Proc | None = None
    named: Proc | None = None  # the process its suspects' pid names, where the world knows it

    @property
    def sources(self) -> set[Source]:
        return {s.source for s in self.suspects}

    @property
    def score(self) -> int:
        best: dict[Source, int] = {}
        for s in self.suspects:
            best[s.source] = max(best.get(s.source, 0), s.weight)
        total = sum(best.values())
        if all(s.waits_elsewhere for s in self.suspects):
            total -= 1
        return total

    def ranked(self) -> list[Suspect]:
        """Its suspects, the heaviest first; at equal weight one that names the process itself
        before one whose pid stands for its engine (`Suspect.stands_in`), then in the parts' order."""
        return sorted(self.suspects, key=lambda s: (-s.weight, s.stands_in))

    def first(self, attr: str) -> object:
        for s in self.ranked():
            v = getattr(s, attr)
            if v is not None:
                return v
        return None

    def culprit(self) -> Culprit:
        ordered = self.ranked()
        reasons: dict[str, str] = {}  # why -> the rule that gave it (the first that did)
        for s in ordered:
            reasons.setdefault(s.why, s.by or "")
        whys = list(reasons)
        held = self.holder
        pid = held.pid if held is not None else self.first("pid")
        node = (held.node_ip if held is not None else None) or self.first("node_ip")
        return Culprit(
            role=self.role,
            why=" | ".join(whys[:4]),
            node_ip=node,  # type: ignore[arg-type]
            pid=pid,  # type: ignore[arg-type]
            rank=self.first("rank"),  # type: ignore[arg-type]
            engine_url=self.first("engine_url"),  # type: ignore[arg-type]
            actor_id=self.first("actor_id"),  # type: ignore[arg-type]
            gpu=self.first("gpu"),  # type: ignore[arg-type]
            process=self.process_kind(),
            by=tuple(reasons[w] for w in whys[:4]),
        )

    def process_kind(self) -> str | None:
        """Which process of its engine the culprit's pid is (`scheduler`, `detokenizer`, ...), for
        a role of several processes; None for the others."""
        if self.role is not Role.SGLANG_ENGINE:
            return None
        proc = self.holder or self.named
        return process_kind(proc) if proc is not None else None

    def marked_pids(self) -> set[int]:
        """The processes the report marks as culprits: the holder, and each process a suspect
        names by its own state (not a pid that only stands for its engine)."""
        pids = {s.pid for s in self.suspects if s.pid is not None and not s.stands_in}
        if self.holder is not None:
            pids.add(self.holder.pid)
        if not pids:
            pid = self.first("pid")
            if isinstance(pid, int):
                pids.add(pid)
        return pids

    @property
    def stage(self) -> Stage | None:
        for s in self.ranked():
            if s.stage is not None:
                return s.stage
        return None


def merge(suspects: list[Suspect], world: World) -> list[Merged]:
    """Join suspects that name the same process (pid), engine (url) or rank."""
    groups: list[Merged] = []
    for s in suspects:
        target = next((g for g in groups if _same(g, s, world)), None)
        if target is None:
            target = Merged(s.role)
            groups.append(target)
        target.suspects.append(s)
    for g in groups:
        g.holder = holder(g, world)
        pid = g.first("pid")
        if isinstance(pid, int):
            g.named = world.find(pid, g.first("node_ip"))  # type: ignore[arg-type]
    return sorted(groups, key=lambda g: (-g.score, -max(s.weight for s in g.suspects)))


def _same(g: Merged, s: Suspect, world: World) -> bool:
    for o in g.suspects:
        if s.engine_url and o.engine_url and s.role is o.role:
            if s.engine_url == o.engine_url:
                return True  # an engine is its actor, server and schedulers together
            continue
        if s.pid is not None and o.pid is not None:
            if s.pid == o.pid and (
                s.node_ip is None or o.node_ip is None or s.node_ip == o.node_ip
            ):
                return True
            continue
        if s.engine_url and o.engine_url and s.engine_url == o.engine_url:
            return True
        if (
            s.role is Role.TRAIN_RANK
            and o.role is Role.TRAIN_RANK
            and s.rank is not None
            and s.rank == o.rank
        ):
            return True
        if s.gpu is not None and o.gpu is not None and s.gpu == o.gpu:
            same_node = s.node_ip is None or o.node_ip is None or s.node_ip == o.node_ip
            if same_node and gpu_by_index(world.gpus, s.gpu, s.node_ip) is not None:
                return True
    return False


_KIND_WORDS = {
    MemberKind.ACTOR: "SGLangEngine actor",
    MemberKind.HTTP_SERVER: "HTTP server",
    MemberKind.NODE_LAUNCHER: "node launcher",
    MemberKind.SCHEDULER: "scheduler",
    MemberKind.DETOKENIZER: "detokenizer",
    MemberKind.TOKENIZER_WORKER: "tokenizer worker",
}

# where a process of an engine holds: parked, asleep, in a collective or at a CUDA sync, on a CPU.
# Not the blocks that wait on another process (HTTP, ray.get, an idle event loop, an idle Ray
# worker, a child): such a process is a waiter, never where its engine holds
_HELD_BLOCKS = frozenset(
    {Block.COLLECTIVE, Block.RENDEZVOUS, Block.CUDA_SYNC, Block.PARKED, Block.SLEEP, Block.CPU}
)


def process_kind(p: Proc) -> str:
    """`scheduler`, `scheduler TP1` (its title's rank), `HTTP server`, `detokenizer`, ..."""
    words = _KIND_WORDS.get(p.kind, p.kind.value.replace("_", " "))
    tp = tp_rank(p)
    return f"{words} TP{tp}" if tp is not None else words


def tp_rank(p: Proc) -> int | None:
    """A scheduler's TP rank, from its title (`sglang::scheduler_TP1`); None for any other
    process, or a scheduler whose title was not read."""
    title = p.member.title if p.member is not None else ""
    return scheduler_tp_rank(title) if p.kind is MemberKind.SCHEDULER else None


def holder(g: Merged, world: World) -> Proc | None:
    """For a role of several processes (an engine: actor, HTTP server, schedulers, detokenizer),
    the process whose own state shows the hold, where no suspect named one: each suspect's pid
    only stands for its engine (`Suspect.stands_in`, the HTTP server by default). Among the
    engine's processes, one whose stack waits inside the engine's work (a stage, and a block that
    is no wait on another process: a scheduler parked under `forward_decode`, a rank in a
    collective, a loop on a CPU), a scheduler first. None: nothing of the group shows it. Such
    a process that a lighter suspect names by its own state comes first, on whatever node (a
    multi-node engine's rank on another node than the server the heavier suspect stands for)."""
    named = [s for s in g.ranked() if s.pid is not None]
    if not named or not named[0].stands_in:
        return None
    for s in named:
        p = None if s.stands_in else world.find(s.pid, s.node_ip)
        if p is not None and _holds(p) and p.engine_url == g.first("engine_url"):
            return p
    url = g.first("engine_url")
    if url is None:
        return None
    node = g.first("node_ip")
    held = [
        p
        for p in world.procs
        if p.engine_url == url
        and p.role is g.role
        and (node is None or p.node_ip in (None, node))
        and _holds(p)
    ]
    if not held:
        return None
    return max(held, key=lambda p: (p.kind is MemberKind.SCHEDULER, -held.index(p)))


def _holds(p: Proc) -> bool:
    """Its stack waits inside its engine's work: a stage, and a block that is no wait on another
    process (`_HELD_BLOCKS`)."""
    return p.latest is not None and p.latest.stage is not None and p.latest.block in _HELD_BLOCKS
