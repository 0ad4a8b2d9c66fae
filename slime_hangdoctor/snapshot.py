"""The analysis input: every fact parsed out of one bundle, tagged with where and when it was seen.

`Snapshot` is built by `slime_hangdoctor.load.load_snapshot(bundle)`; the analysis reads nothing else.
It holds the facts of every source as its spec filed them (`facts(SPEC)`), and builds once the
views that join a source's records (`joined(JOIN)`, declared beside the source's spec): it has no
field or accessor of its own for any source.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeVar

from slime_hangdoctor.bundle import Manifest
from slime_hangdoctor.parsers import processes
from slime_hangdoctor.parsers.processes import ProcessInfo
from slime_hangdoctor.source_spec import Join, Observed, SourceSpec

F = TypeVar("F")
J = TypeVar("J")


@dataclass(frozen=True)
class Snapshot:
    manifest: Manifest
    # the facts of every source, each filed by its spec (source_spec.SourceSpec.parse), in the
    # bundle's order: read them with facts(SPEC), or through a source's Join
    observed: tuple[Observed[Any], ...] = ()
    blind_spots: tuple[str, ...] = ()  # probes that failed or were not allowed, parse failures
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def window_s(self) -> float:
        return self.manifest.window_s

    def facts(self, spec: SourceSpec[F]) -> tuple[Observed[F], ...]:
        """Every fact of one source, in the bundle's order."""
        by_source = self.__dict__.get("_by_source")
        if by_source is None:
            grouped: dict[str, list[Observed[Any]]] = {}
            for obs in self.observed:
                grouped.setdefault(obs.source, []).append(obs)
            by_source = {name: tuple(group) for name, group in grouped.items()}
            object.__setattr__(self, "_by_source", by_source)
        found: tuple[Observed[F], ...] = by_source.get(spec.name, ())
        return found

    def facts_of(self, *specs: SourceSpec[Any]) -> tuple[Observed[Any], ...]:
        """Every fact of several sources, in the bundle's order (their records interleaved)."""
        names = {spec.name for spec in specs}
        return tuple(obs for obs in self.observed if obs.source in names)

    def joined(self, join: Join[J]) -> J:
        """The view `join` builds of this snapshot's facts, built once."""
        views: dict[Join[Any], Any] = self.__dict__.setdefault("_joined", {})
        if join not in views:
            views[join] = join.build(self)
        view: J = views[join]
        return view

    def processes_at(self, sample: int) -> tuple[ProcessInfo, ...]:
        return tuple(
            p for obs in self.facts(processes.SPEC) if obs.sample == sample for p in obs.fact
        )
