"""Join suspects that name the same process (pid), engine (url), rank or GPU into one `Merged`
candidate; its score sums the best weight of each source that names it."""

from __future__ import annotations

from dataclasses import dataclass, field

from slime_hangdoctor.analysis.gpu import gpu_by_index
from slime_hangdoctor.analysis.source import Source
from slime_hangdoctor.analysis.source_analysis import Suspect
from slime_hangdoctor.analysis.world import World
from slime_hangdoctor.verdict import Culprit, Role, Stage


@dataclass
class Merged:
    role: Role
    suspects: list[Suspect] = field(default_factory=list)

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
        whys = list(dict.fromkeys(s.why for s in ordered))
        return Culprit(
            role=self.role,
            why=" | ".join(whys[:4]),
            node_ip=self.first("node_ip"),  # type: ignore[arg-type]
            pid=self.first("pid"),  # type: ignore[arg-type]
            rank=self.first("rank"),  # type: ignore[arg-type]
            engine_url=self.first("engine_url"),  # type: ignore[arg-type]
            actor_id=self.first("actor_id"),  # type: ignore[arg-type]
            gpu=self.first("gpu"),  # type: ignore[arg-type]
        )

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
