"""One evidence source, declared once: `SourceSpec` says what the loader, the collector and the
analysis need of it, and `Observed` is one fact it produced, tagged with where and when.

A source's spec lives in its own parser module (`parsers/<source>.py`, as `SPEC`) and is listed once,
in `slime_hangdoctor/sources.py`. Everything else iterates over that list:

- the loader (`load.py`) parses each ok record of the source (each record, whatever its outcome,
  of a source whose failed answers are evidence too: `every_outcome`) with `spec.parse` into an
  `Observed`, and the Snapshot holds it (`snapshot.facts(SPEC)`), so a new source adds no Snapshot
  field; a source whose records join (the newest of several answers, two sources read as one)
  declares the view that joins them beside its spec, as a `Join` (`snapshot.joined(JOIN)`);
- the collector (`collect/node.py`) runs `NODE_PROBE` of `spec.node_probe` (a module of `collect/`)
  on every slime node at each sample, unless the run turned the source off (`spec.switch`);
- the analysis (`analysis/diagnosis.py`) runs `ANALYSIS` of `spec.analysis` (a module of
  `analysis/`): its findings, progress signals, stage hint and next steps; `spec.missing` is its
  blind spot when the run holds no fact of it.

The upper layers' parts are named by module (a string) because the spec lives below them: the spec
may not import the collector or the analysis (tests/unit/test_import_layers.py), and each layer
imports only its own part (tests/unit/test_source_tables.py checks every name resolves in its layer).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

if TYPE_CHECKING:
    from slime_hangdoctor.bundle import ProbeRecord

F = TypeVar("F")
J = TypeVar("J")
J_co = TypeVar("J_co", covariant=True)


@dataclass(frozen=True)
class Observed(Generic[F]):
    """One fact of one source, as a probe record of it saw it."""

    source: str  # the spec's name (the ProbeRecord's source)
    node_ip: str | None
    sample: int  # 0 or 1 (one-off probes: 0)
    fact: F
    at: float = 0.0  # when the probe started (epoch seconds; 0 when the bundle does not say)


# The bytes of one record, and the record (its meta, target, outcome) -> the fact; raises
# errors.ParseError on bad input. `data` is None only for a source parsed whatever its outcome
# (`every_outcome`) whose record kept no artefact.
Parse = Callable[[bytes, "ProbeRecord"], F]
ParseAny = Callable[[bytes | None, "ProbeRecord"], F]


@dataclass(frozen=True)
class SourceSpec(Generic[F]):
    """Everything about one evidence source that is not its own code."""

    name: str  # ProbeRecord.source, and the folder of its artefacts under raw/
    # one ok record -> its fact (for an `every_outcome` source: every record, `parse_any`)
    parse: Parse[F] | None
    max_bytes: int  # the largest artefact of it that a bundle may make the loader parse
    # parsed whatever its outcome (a refused connection, a timeout, a 503 are evidence): the
    # engines' and routers' HTTP answers; then `parse_any` takes the place of `parse`
    parse_any: ParseAny[F] | None = None
    partial: bool = False  # an ok record may still say which part of it failed (one GPU of eight)
    discovery: bool = False  # read again while collecting, to find who is who (collect/node.py)
    # the blind spots a parsed fact shows (e.g. the kernel log was not readable, a truncated task
    # list, a body that did not parse); gets the record it came from
    notes: Callable[[F, ProbeRecord], tuple[str, ...]] | None = None
    missing: str = ""  # the blind spot of a run that holds no fact of it ("" = none worth saying)
    node_probe: str | None = None  # module of collect/ with NODE_PROBE, run on every slime node
    # module of collect/ with WINDOW_PROBE: started once, in the window's idle wait (the first
    # sample is in), a reading of the cluster that needs no node (the job's logs, Ray's log API)
    window_probe: str | None = None
    # its node probe attaches to the processes it reads (py-spy stops each one while it reads it):
    # it runs after every other node probe, so that their reads see the processes undisturbed
    attaches: bool = False
    analysis: str | None = None  # module of analysis/ with ANALYSIS
    # the CollectOptions field that turns it off (a bool), None = always on
    switch: str | None = None

    def __repr__(self) -> str:
        return f"SourceSpec({self.name!r})"


class Facts(Protocol):
    """What a `Join` reads: the facts the loader filed (a Snapshot)."""

    def facts(self, spec: SourceSpec[F]) -> tuple[Observed[F], ...]: ...

    def facts_of(self, *specs: SourceSpec[Any]) -> tuple[Observed[Any], ...]: ...

    def joined(self, join: Join[J]) -> J: ...


@dataclass(frozen=True, eq=False)
class Join(Generic[J_co]):
    """A view that joins the facts of a source's records (the newest of the Ray state's answers,
    the stacks of py-spy and of Ray's dashboard, the HTTP answers of engines and routers). Declared
    beside the source's spec; `Snapshot.joined(JOIN)` builds it once per snapshot."""

    name: str
    build: Callable[[Facts], J_co]

    def __repr__(self) -> str:
        return f"Join({self.name!r})"
