"""A part of the diagnosis, and the one way the diagnosis reaches every part.

A part is one `SourceAnalysis`, as `ANALYSIS` in its own module under `analysis/parts/`: what one
typed source adds to a verdict (the NCCL RAS counts, the engines' answers, the kernel's view of the
processes, ...), or one rule that reads several sources at once (the end of a ray.get chain, the
rollout's event loop, the known bugs matched by their frames). It holds all of it, every hook
optional: the signals of work between the samples (`progress`), who the others wait for
(`suspects`, or `fallback` when nobody else named anyone), the reasons to believe the job hangs
(`evidence` with the headline of each finding id in `messages`), a second stage signal (`stage`),
the known causes whose evidence it holds (`causes`), its findings (`findings`, in `section`) and its
next steps (`next_steps`).

One list, one order: `sources.ENTRIES`. A source's spec names the part about that source
(`SourceSpec.analysis`), which runs at the spec's place; a part that reads several sources is an
entry of its own there. `source_analyses()` resolves the list; `diagnose()` runs every hook of every
part in that order (the order breaks ties between suspects and orders each section of the findings).
Adding a rule is its own module and one line in sources.ENTRIES, or a new hook in the module of the
part whose evidence it needs (no line elsewhere).

A part's typed name (`Source`) is made once, in the part that owns it (`KERNEL = Source("kernel")`
in parts/kernel.py), and imported by any other part that blames in its name: a bare string is not a
`Source`, so mypy rejects a misspelt one. `gives` declares the names a part's suspects, evidence and
signals carry (tests/unit/test_source_names.py holds every part to it on the recorded bundles).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from types import FrameType
from typing import TypeVar

from slime_hangdoctor.analysis.readers.proof import Moved, Progress, combine
from slime_hangdoctor.analysis.source import Source
from slime_hangdoctor.analysis.world import Proc, World
from slime_hangdoctor.sources import ENTRIES, PARSERS, PARTS, SPECS
from slime_hangdoctor.verdict import Finding, NextStep, Role, Severity, Stage, Status

__all__ = ["Source"]  # the typed name, for the parts (analysis/source.py)

T = TypeVar("T")

STRONG = 3  # the source names this process as the one missing (RAS, FR, dead engine)
MEDIUM = 2
WEAK = 1


# --------------------------------------------------------------------------- what a part reads


@dataclass(frozen=True)
class Reads:
    """What every part's suspects and evidence read (all pure, all built once per diagnosis). A
    reader's view of the world that several parts share (the engines' reads, `read_engines`) is
    memoised on the world (`World.memo`), so the contract names no source."""

    world: World
    progress: Progress


@dataclass(frozen=True)
class Reading:
    """What a part's known causes, findings and next steps read: the reads and the verdict decided
    so far."""

    world: World
    progress: Progress
    status: Status
    stage: (
        Stage  # the verdict's stage (NONE unless hung; a part's stage signal where live found none)
    )
    live_stage: Stage  # the stage the live evidence found (NONE unless hung, UNKNOWN when none did)


# --------------------------------------------------------------------------- what a part gives


@dataclass(frozen=True)
class Suspect:
    """One source naming one process (engine, rank, GPU) as the one the others wait for, with a
    weight; `merge.merge` joins suspects that name the same process."""

    source: Source
    role: Role
    why: str
    evidence: tuple[str, ...] = ()
    weight: int = WEAK
    pid: int | None = None
    node_ip: str | None = None
    rank: int | None = None
    engine_url: str | None = None
    actor_id: str | None = None
    gpu: int | None = None
    stage: Stage | None = None  # the stage this evidence points at (e.g. the stuck collective's)
    waits_elsewhere: bool = False  # the suspect itself waits on something else (chain continues)
    # its pid stands for its engine (the front process), not for a process it saw wait: within a
    # candidate, at equal weight, a suspect that names the process itself speaks first
    stands_in: bool = False
    by: str | None = None  # the rule that named it (`by_of`: stamped by the runner that called it)
    # the function of the part that built it, read from the call stack (`_made_in`): the rule
    # within the part's hook that `by` names where it is the hook's own module's
    made_in: str | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.made_in is None:
            object.__setattr__(self, "made_in", _made_in())


@dataclass(frozen=True)
class Evidence:
    """One reason to believe the job is hung, whoever is to blame."""

    source: Source
    rule: str  # the finding id it is reported under (the headline is in its part's `messages`)
    text: str
    strength: int  # 1 weak, 2 strong
    by: str | None = None  # the rule that gave it (`by_of`: stamped by the runner that called it)
    made_in: str | None = field(default=None, compare=False, repr=False)  # as Suspect's

    def __post_init__(self) -> None:
        if self.made_in is None:
            object.__setattr__(self, "made_in", _made_in())


def _made_in() -> str | None:
    """`module:function` of the innermost function of analysis/parts/ on the call stack that is
    building a suspect or an evidence (comprehensions and helpers of this module skipped)."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        name = frame.f_code.co_name
        if module.startswith(PARTS) and not name.startswith("<"):
            return f"{module}:{name}"
        frame = frame.f_back
    return None


@dataclass(frozen=True)
class Cause:
    """A known cause the evidence matches: its finding and what to do about it."""

    finding: Finding
    steps: tuple[str | NextStep, ...] = ()
    # the verdict's headline, where this cause is the answer (ranks in different collectives):
    # the summary reads `Hung in <stage>: <headline>`, decided by the cause's rule (its finding's
    # `by`, also the verdict's `extra.summary_by`); the first such cause, in the parts' order.
    # It stands over the culprits only where each is one of `about` (the processes the cause
    # explains: a flight recorder's ranks of the mismatch); another culprit keeps the headline
    headline: str | None = None
    about: frozenset[int] = frozenset()


def cause(
    rule: str, sev: Severity, msg: str, ev: Sequence[str], steps: Sequence[str | NextStep]
) -> Cause:
    return Cause(Finding(rule, sev, msg, tuple(ev[:6])), tuple(steps))


class Section(Enum):
    STATE = "state"  # what the job's processes, engines and cluster show now
    LOGS = "logs"  # what the logs say (after the progress findings)


def from_proc(proc: Proc | None, **kw: object) -> dict[str, object]:
    """Identity fields of a suspect, filled from what the world knows about the process. A process
    that a slime process forked (`Proc.is_child`: an async checkpoint writer, a DataLoader worker)
    is not a culprit of its own: the suspect names its parent (for a train rank, the rank), and the
    part's `why` names the child as where it waits."""
    out: dict[str, object] = dict(kw)
    if proc is None:
        return out
    known: dict[str, object] = {
        "pid": proc.parent_pid if proc.is_child and proc.parent_pid else proc.pid,
        "node_ip": proc.node_ip,
        "rank": proc.rank,
        "engine_url": proc.engine_url,
        "actor_id": proc.actor_id,
        "gpu": proc.gpu.index if proc.gpu is not None else None,
    }
    for key, value in known.items():
        if out.get(key) is None and value is not None:
            out[key] = value
    return out


def suspect(source: Source, role: Role, why: str, proc: Proc | None, **kw: object) -> Suspect:
    fields = from_proc(proc, **kw)
    return Suspect(source=source, role=role, why=why, **fields)  # type: ignore[arg-type]


def brief(p: Proc) -> str:
    return p.latest.describe() if p.latest else "no stack"


# --------------------------------------------------------------------------- the part


class StageRank(Enum):
    """When a part's stage signal counts (SourceAnalysis.stage_rank)."""

    FIRST = "first"  # before the stacks' vote: a record that names the collective behind
    HINT = "hint"  # only where the live evidence named no stage


@dataclass(frozen=True, eq=False)
class SourceAnalysis:
    """A part of the diagnosis; every hook is optional."""

    name: str  # the part's own name (its module's), for the tests and the docs
    gives: tuple[Source, ...] = ()  # the names its suspects, evidence and signals carry
    # what moved between the samples by this source (work, activity, frozen work)
    progress: Callable[[World], Moved] | None = None
    # who the others wait for, by this part; a fallback runs only when no part named anyone
    suspects: Callable[[Reads], list[Suspect]] | None = None
    fallback: bool = False
    # reasons to believe the job hangs, by this part, and the headline of each finding id
    evidence: Callable[[Reads, Sequence[Suspect]], list[Evidence]] | None = None
    messages: Mapping[str, str] = field(default_factory=dict)
    # a stage signal; `stage_rank` says when it counts: FIRST before the stacks' vote (the flight
    # recorder's stuck collective: the group behind names its collective), HINT only where the
    # live evidence named no stage (the logs' open Timer)
    stage: Callable[[World], Stage | None] | None = None
    stage_rank: StageRank = StageRank.HINT
    # the names of its suspects that blame a loop CPU-bound in one frame holding the job's
    # requests (the rollout's loop, a hop of its request path): over one window slow and stuck
    # look alike, so a culprit blamed by such names alone is only suspected (diagnosis._suspected)
    holds: tuple[Source, ...] = ()
    # what this source still says when no slime job runs (a router that lists servers)
    idle_findings: Callable[[World], list[Finding]] | None = None
    # the known causes this part holds the evidence of, in the order they are reported
    causes: tuple[Callable[[Reading], Cause | None], ...] = ()
    findings: Callable[[Reading], list[Finding]] | None = None
    section: Section = Section.STATE
    next_steps: Callable[[Reading], Sequence[str | NextStep]] | None = None  # str: its text
    # this source shows the process waits on local I/O (asleep on a disk, writing into a pipe or
    # socket nobody reads), not on a peer: another part asks it through `waits_on_io`
    io_wait: Callable[[World, Proc], bool] | None = None
    # this source shows the seconds of a window (the float) that a process's main thread was on a
    # CPU or waiting for one (None: not read): another part asks it through `cpu_wanted_s`
    cpu_wanted: Callable[[World, Proc, float], float | None] | None = None

    def __repr__(self) -> str:
        return f"SourceAnalysis({self.name!r})"


def _load(module: str, where: str) -> SourceAnalysis:
    if not module.startswith(PARTS):
        raise ValueError(f"{where}: a part of the diagnosis is a module of analysis/parts/")
    analysis = importlib.import_module(module).ANALYSIS
    if not isinstance(analysis, SourceAnalysis):
        raise TypeError(f"{module}.ANALYSIS is not a SourceAnalysis")
    return analysis


@functools.cache
def source_analyses() -> tuple[SourceAnalysis, ...]:
    """Every part, in the order of sources.ENTRIES: a spec's part (`SourceSpec.analysis`) at the
    spec's place, a part of its own where the list names it."""
    specs = iter(SPECS)
    found: list[SourceAnalysis] = []
    for entry in ENTRIES:
        if entry.startswith(PARSERS):
            spec = next(specs)
            if spec.analysis is not None:
                found.append(_load(spec.analysis, spec.name))
        else:
            found.append(_load(entry, entry))
    return tuple(found)


# --------------------------------------------------------------------------- running the parts


def assess(world: World) -> Progress:
    """What moved between the samples, by every part (progress.combine orders it by kind of proof)."""
    return combine([a.progress(world) for a in source_analyses() if a.progress])


def by_of(fn: Callable[..., object], hook: str = "") -> str:
    """Provenance: the rule a function is, as `parts/engines:suspects` (its module under
    slime_hangdoctor.analysis, and its own name; a part's hook written as a lambda is named by
    the hook, `parts/ray_state:findings`), read from the function object itself so that no part can
    give a name not its own (docs/verdict.md, "Provenance")."""
    module = fn.__module__.removeprefix("slime_hangdoctor.analysis.").replace(".", "/")
    name = getattr(fn, "__name__", "")
    if name == "<lambda>" or not name:
        name = hook or "?"
    return f"{module}:{name}"


def _stamp(items: Sequence[T], fn: Callable[..., object], hook: str) -> list[T]:
    """Each item with the rule that gave it: the hook the runner called, or the function of the
    same module within it that built the item (`made_in`), never a name of another module."""
    by = by_of(fn, hook)
    out: list[T] = []
    for x in items:
        made = getattr(x, "made_in", None)
        module, _, name = (made or "").partition(":")
        rule = f"{by.partition(':')[0]}:{name}" if module == fn.__module__ and name else by
        out.append(dataclasses.replace(x, by=rule))  # type: ignore[type-var]
    return out


def steps_by(
    steps: Sequence[str | NextStep], fn: Callable[..., object], hook: str = ""
) -> list[NextStep]:
    """Steps as `NextStep`s with the rule that gave them."""
    by = by_of(fn, hook)
    return [
        dataclasses.replace(s, by=by) if isinstance(s, NextStep) else NextStep.parse(s, by=by)
        for s in steps
    ]


def find_suspects(reads: Reads) -> list[Suspect]:
    """Every part's suspects, in the parts' order; the fallbacks only when nobody was named."""
    parts = source_analyses()
    out = [
        s
        for a in parts
        if a.suspects and not a.fallback
        for s in _stamp(a.suspects(reads), a.suspects, "suspects")
    ]
    if not out:
        out = [
            s
            for a in parts
            if a.suspects and a.fallback
            for s in _stamp(a.suspects(reads), a.suspects, "suspects")
        ]
    return out


def hang_evidence(reads: Reads, suspects: Sequence[Suspect]) -> list[Evidence]:
    """Every part's reasons to believe the job is hung, in the parts' order."""
    return [
        e
        for a in source_analyses()
        if a.evidence
        for e in _stamp(a.evidence(reads, suspects), a.evidence, "evidence")
    ]


@functools.cache
def evidence_messages() -> Mapping[str, str]:
    """Finding id -> headline, of every part's evidence."""
    return {rule: text for a in source_analyses() for rule, text in a.messages.items()}


def known_causes(reading: Reading) -> list[Cause]:
    """Every part's known causes that the evidence matches, in the parts' order, each finding
    and step with the rule that matched it."""
    out: list[Cause] = []
    for a in source_analyses():
        for rule in a.causes:
            c = rule(reading)
            if c is not None:
                finding = dataclasses.replace(c.finding, by=by_of(rule))
                out.append(Cause(finding, tuple(steps_by(c.steps, rule)), c.headline, c.about))
    return out


def section_findings(reading: Reading, section: Section) -> list[Finding]:
    return [
        f
        for a in source_analyses()
        if a.findings is not None and a.section is section
        for f in _stamp(a.findings(reading), a.findings, "findings")
    ]


def part_steps(reading: Reading) -> list[NextStep]:
    return [
        s
        for a in source_analyses()
        if a.next_steps is not None
        for s in steps_by(a.next_steps(reading), a.next_steps, "next_steps")
    ]


def waits_on_io(world: World, p: Proc) -> bool:
    """Some part's source shows `p` waits on local I/O, not on a peer (the kernel's wait
    channel): a part that reads a wait in `p`'s stack asks this, not the other source's module."""
    return any(a.io_wait(world, p) for a in source_analyses() if a.io_wait is not None)


def cpu_wanted_s(world: World, p: Proc, window_s: float) -> float | None:
    """Seconds of a window of `window_s` that `p`'s main thread was on a CPU or waiting for one,
    by the first part whose source read it (the kernel's /proc/<pid>/schedstat); None: unread."""
    for a in source_analyses():
        if a.cpu_wanted is not None and (s := a.cpu_wanted(world, p, window_s)) is not None:
            return s
    return None


def _stages(world: World, rank: StageRank) -> Stage | None:
    return next(
        (
            h
            for a in source_analyses()
            if a.stage and a.stage_rank is rank and (h := a.stage(world))
        ),
        None,
    )


def stage_hint(world: World) -> Stage | None:
    """The first part's second stage signal (the logs' open Timer), for a hang live evidence
    could not place."""
    return _stages(world, StageRank.HINT)


def first_stage(world: World) -> Stage | None:
    """The first part's stage that outranks the stacks' vote (the flight recorder's stuck
    collective), in the order of the parts."""
    return _stages(world, StageRank.FIRST)


def holding_sources() -> frozenset[Source]:
    """Every name a part blames a loop holding the job's requests in (`SourceAnalysis.holds`)."""
    return frozenset(s for a in source_analyses() for s in a.holds)


def idle_findings(world: World) -> list[Finding]:
    """What the parts still say when no slime job runs, each with the rule that said it."""
    return [
        dataclasses.replace(f, by=by_of(a.idle_findings, "idle_findings"))
        for a in source_analyses()
        if a.idle_findings is not None
        for f in a.idle_findings(world)
    ]
