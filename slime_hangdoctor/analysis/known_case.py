"""A known public case and the evidence it needs, matched against what a bundle shows.

A `KnownCase` is one table entry (parts/known_bugs.py): the case (`THUDM/slime PR#2331`), its
cause, and as typed fields each piece of evidence that case needs beyond its frames: the job's
settings (PP size, a draft model), the weight-update groups' names, the engines' place in those
groups, an odd scheduler among an engine's TP ranks, the slime version that fixed it. The frames
gate the rule (its function finds them; without them there is no finding). Every other field the
entry sets is read here and judged `MET`, `UNSHOWN` (not collected, not in the bundle) or
`CONTRADICTED`:

- all met: the cause is asserted (`rule`, the entry's message and severity);
- some unshown, none contradicted: "similar to <case>" (`similar`, INFO): what matched, what was
  not shown, and the case's cause as that case's, never this job's;
- one contradicted: no finding (the frames fit another case).

A known cause is a finding and next steps only: it never names a culprit or a stage, so a loose
match cannot override the evidence that did."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from slime_hangdoctor.analysis.actor_queues import build_view
from slime_hangdoctor.analysis.job_flags import as_int, job_flag
from slime_hangdoctor.analysis.readers.pyspy import ThreadRead
from slime_hangdoctor.analysis.signatures.sglang import WEIGHT_GROUP_FUNCS
from slime_hangdoctor.analysis.world import Proc, World, threads_with
from slime_hangdoctor.parsers.logs import SPEC as LOGS
from slime_hangdoctor.parsers.logs import GroupJoin
from slime_hangdoctor.topology import CLASS_ROLES, MemberKind
from slime_hangdoctor.verdict import NextStep, Role, Severity


def _engine_class(name: str | None) -> bool:
    return name is not None and CLASS_ROLES.get(name) is Role.SGLANG_ENGINE


class Fit(Enum):
    MET = "shown"
    UNSHOWN = "not shown"
    CONTRADICTED = "contradicted"


@dataclass(frozen=True)
class Check:
    """One piece of evidence a case needs, as the bundle shows it."""

    need: str  # `PP size >= 2`
    fit: Fit
    seen: str  # what the bundle shows, or why it shows nothing


@dataclass(frozen=True)
class FlagNeed:
    """A job setting the case needs, read from the job's command lines (analysis/job_flags.py)."""

    what: str  # `PP size`
    flags: frozenset[str]  # the flags that set it (`--pipeline-model-parallel-size`)
    at_least: int | None = None  # a number at least this; None: set to anything but none
    # where no command line shows it: the group names of `KnownCase.group_prefix` with a number
    # after it (slime's `slime-pp_<pp rank>`) show it at least that number + 1
    from_group_numbers: bool = False


@dataclass(frozen=True)
class FramesNeed:
    """Threads a case needs: of the processes of `role` (None: any process of the job), with one of
    `funcs` among their own frames, or a frame in a file whose path holds `file_part`."""

    what: str  # `train ranks creating the weight-update group under connect_rollout_engines`
    role: Role | None
    funcs: frozenset[str] = frozenset()
    file_part: str | None = None


def frame_hits(w: World, need: FramesNeed) -> list[tuple[Proc, ThreadRead]]:
    """The threads of the processes' last stacks that `need` matches."""
    procs = w.procs if need.role is None else w.by_role(need.role)
    hits = threads_with(procs, need.funcs) if need.funcs else []
    if need.file_part is not None:
        hits += [h for h in threads_with(procs, file_part=need.file_part) if h not in hits]
    return hits


@dataclass(frozen=True)
class KnownCase:
    rule: str  # the finding id when every piece is shown: `known-<case>`
    case: str  # the public thread: `THUDM/slime PR#2331`
    cause: str  # that case's cause, in a sentence
    frames: tuple[FramesNeed, ...]  # the gate: the rule's function reads these (and their blocks)
    flags: tuple[FlagNeed, ...] = ()
    group_prefix: str | None = None  # the weight-update groups' names start with it
    engines_split: bool = False  # the engines joined different groups, each waiting for the others
    # TP >= 2 schedulers of one engine, one outside the others' wait, on the engines whose
    # schedulers show one of these frames (empty: not needed)
    odd_scheduler_under: frozenset[str] = frozenset()
    fixed_in: str | None = None  # the slime release or PR with the fix (asserted only before it)
    checks: tuple[str, ...] = ()  # next steps that check the case (asserted or similar)
    fixes: tuple[str, ...] = ()  # next steps that fix it (asserted only)

    @property
    def similar(self) -> str:
        """The finding id when only part is shown: `similar-<case>`."""
        return "similar-" + self.rule.removeprefix("known-")


# --------------------------------------------------------------------------- the readers


def engine_joins(w: World) -> dict[str, tuple[GroupJoin, ...]]:
    """SGLangEngine actor id -> the weight-update groups its logs say it joined (oldest first)."""
    out: dict[str, tuple[GroupJoin, ...]] = {}
    for obs in w.snapshot.facts(LOGS):
        log = obs.fact
        if _engine_class(log.class_name) and log.actor_id and log.tail.group_joins:
            out[log.actor_id] = out.get(log.actor_id, ()) + log.tail.group_joins
    return out


def _flag(w: World, need: FlagNeed, case: KnownCase) -> Check:
    label = f"{need.what} >= {need.at_least}" if need.at_least else f"{need.what} set"
    found = job_flag(w, need.flags)
    if found is not None:
        n = as_int(found.value)
        ok = (
            n is not None and n >= need.at_least
            if need.at_least is not None
            else found.value.lower() not in ("", "none", "null")
        )
        seen = f"{found.flag} {found.value} {found.where}"
        return Check(label, Fit.MET if ok else Fit.CONTRADICTED, seen)
    if need.from_group_numbers and case.group_prefix and need.at_least is not None:
        numbers = {
            n
            for joins in engine_joins(w).values()
            for j in joins
            if j.group_name.startswith(case.group_prefix)
            and (n := as_int(j.group_name[len(case.group_prefix) :])) is not None
        }
        if numbers and max(numbers) + 1 >= need.at_least:
            names = ", ".join(f"{case.group_prefix}{n}" for n in sorted(numbers))
            return Check(label, Fit.MET, f"groups {names} (one per PP rank)")
    return Check(label, Fit.UNSHOWN, f"no command line shows {' / '.join(sorted(need.flags))}")


def _groups(w: World, prefix: str) -> Check:
    need = f"weight-update groups named {prefix}<k>"
    names = sorted({j.group_name for js in engine_joins(w).values() for j in js})
    if not names:
        return Check(need, Fit.UNSHOWN, "no engine log shows a group it joined")
    fit = Fit.MET if all(n.startswith(prefix) for n in names) else Fit.CONTRADICTED
    return Check(need, fit, f"the engines joined {', '.join(names)}")


def _split_by_queues(w: World) -> list[str]:
    """Engine actors that run one group join while another waits in their method queue."""
    view = build_view(w.snapshot)
    if view is None:
        return []
    return [
        q.actor.name or q.actor.actor_id[:8]
        for q in view.queues
        if _engine_class(q.actor.class_name)
        and any(t.method in WEIGHT_GROUP_FUNCS for t in q.running)
        and any(t.method in WEIGHT_GROUP_FUNCS for t in q.queued)
    ]


SPLIT = "the engines joined different groups, each waiting for the others"


def _split_by_logs(joins: dict[str, tuple[GroupJoin, ...]]) -> Check:
    """From the engines' logs: each engine's last group, and whether each such group still waits
    for ranks (fewer engine ranks joined it than its world size less the trainer's rank 0)."""
    latest = {actor: js[-1] for actor, js in joins.items()}
    groups = {j.group_name for j in latest.values()}
    if len(groups) == 1:
        return Check(SPLIT, Fit.CONTRADICTED, f"every engine joined {groups.pop()}")
    ranks: dict[str, set[int]] = {}
    for js in joins.values():
        for j in js:
            ranks.setdefault(j.group_name, set()).add(j.rank)
    sizes = {j.group_name: j.world_size for j in latest.values()}
    complete = sorted(g for g in groups if len(ranks[g]) >= sizes[g] - 1)
    if complete:
        return Check(SPLIT, Fit.CONTRADICTED, f"every engine rank joined {', '.join(complete)}")
    seen = "; ".join(
        f"engine {a[:8]} joined {j.group_name} as rank {j.rank} of {j.world_size}"
        for a, j in sorted(latest.items())
    )
    return Check(SPLIT, Fit.MET, seen)


def _split(w: World) -> Check:
    joins = engine_joins(w)
    if len(joins) >= 2:
        return _split_by_logs(joins)
    queued = _split_by_queues(w)
    if queued:
        seen = f"engine actors {', '.join(queued)} each run one group join with another queued"
        return Check(SPLIT, Fit.MET, seen + " (Ray task list)")
    return Check(SPLIT, Fit.UNSHOWN, "neither the engines' logs nor Ray's task list show it")


def engine_schedulers(w: World) -> dict[str, list[tuple[Proc, ThreadRead]]]:
    """Engine URL -> the deciding thread of each of its schedulers' last stack."""
    out: dict[str, list[tuple[Proc, ThreadRead]]] = {}
    for p in w.by_role(Role.SGLANG_ENGINE):
        if p.kind is MemberKind.SCHEDULER and p.engine_url is not None and p.latest is not None:
            out.setdefault(p.engine_url, []).append((p, p.latest.primary))
    return out


def _odd(w: World, under: frozenset[str]) -> Check:
    need = "TP >= 2 schedulers of one engine, one outside the wait of all the others"
    involved = {p.engine_url for p, _ in threads_with(w.by_role(Role.SGLANG_ENGINE), under)}
    by_engine = {u: s for u, s in engine_schedulers(w).items() if u in involved}
    several = {u: s for u, s in by_engine.items() if len(s) >= 2}
    for url, scheds in several.items():
        out = [p for p, t in scheds if not t.in_collective]
        if len(out) == 1:
            seen = f"{url}: {out[0].label} (pid {out[0].pid}) out of {len(scheds)} schedulers"
            return Check(need, Fit.MET, seen)
    if several:
        return Check(need, Fit.CONTRADICTED, "no engine has exactly one scheduler out")
    return Check(need, Fit.UNSHOWN, "each engine's stacks show one scheduler at most")


def _version(case: KnownCase) -> Check:
    return Check(
        f"a slime older than {case.fixed_in}",
        Fit.UNSHOWN,
        "the doctor does not read slime's version",
    )


def checks(case: KnownCase, w: World) -> list[Check]:
    """Every piece of evidence `case` needs beyond its frames, as the bundle shows it."""
    out = [_flag(w, f, case) for f in case.flags]
    if case.group_prefix is not None:
        out.append(_groups(w, case.group_prefix))
    if case.engines_split:
        out.append(_split(w))
    if case.odd_scheduler_under:
        out.append(_odd(w, case.odd_scheduler_under))
    if case.fixed_in is not None:
        out.append(_version(case))
    return out


# --------------------------------------------------------------------------- the judgement


@dataclass(frozen=True)
class Judged:
    """The finding a case gets: its id, severity, message, evidence and next steps."""

    rule: str
    severity: Severity
    message: str
    evidence: tuple[str, ...]
    steps: tuple[str | NextStep, ...]


def judged(
    case: KnownCase,
    w: World,
    severity: Severity,
    evidence: Sequence[str],
    checks_steps: Sequence[str | NextStep] | None = None,
) -> Judged | None:
    """The finding for `case` on frames that matched (`evidence`): asserted, "similar to", or
    None where the bundle contradicts a piece of the case's evidence. Its steps are the case's
    (`checks_steps`, when given, stand for `case.checks`: steps that name what was read)."""
    if checks_steps is None:
        checks_steps = case.checks
    found = checks(case, w)
    if any(c.fit is Fit.CONTRADICTED for c in found):
        return None
    lines = [f"{c.need}: {c.fit.value} ({c.seen})" for c in found]
    if all(c.fit is Fit.MET for c in found):
        shown = f" Shown: the frames; {'; '.join(lines)}." if lines else ""
        msg = f"{case.cause} ({case.case}).{shown}"
        return Judged(case.rule, severity, msg, (*lines, *evidence), (*checks_steps, *case.fixes))
    met = [c.need for c in found if c.fit is Fit.MET]
    unshown = [f"{c.need} ({c.seen})" for c in found if c.fit is Fit.UNSHOWN]
    msg = (
        f"Similar to {case.case}, not asserted: the frames match "
        f"({'; '.join(f.what for f in case.frames)})"
        f"{'; shown: ' + '; '.join(met) if met else ''}; not shown: {'; '.join(unshown)}. "
        f"That case's cause, which this evidence does not establish: {case.cause}"
    )
    return Judged(case.similar, Severity.INFO, msg, (*lines, *evidence), tuple(checks_steps))
