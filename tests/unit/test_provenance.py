"""Provenance (issue 42, item 4): every culprit reason, finding and next step carries the rule that
made it, `by` = `<module under slime_hangdoctor/analysis>:<function>` (`parts/engines:suspects`,
`parts/ray_tasks:resume_paused`, `diagnosis:_culprit_findings`, `advice:culprit_steps`).

`by` is stamped by the runner that calls each part's hook (source_analysis.by_of reads the
function object it called), never written by a part: each part gives only its own names. Held on
every recorded bundle (tests/fixtures, the same set as the golden verdicts)."""

from __future__ import annotations

import importlib
from collections.abc import Callable

import pytest

from slime_hangdoctor.analysis.source_analysis import SourceAnalysis, by_of, source_analyses
from slime_hangdoctor.pipeline import analyse_bundle
from slime_hangdoctor.sources import ENTRIES, PARSERS, PARTS, SPECS
from tests.unit.test_golden_verdicts import BUNDLES

_HOOKS = ("suspects", "evidence", "findings", "next_steps")


def _part_modules() -> dict[str, SourceAnalysis]:
    """Each part's module, as sources.ENTRIES and the specs' `analysis` name them."""
    names = [e for e in ENTRIES if e.startswith(PARTS)]
    names += [spec.analysis for spec in SPECS if spec.analysis is not None]
    return {n: importlib.import_module(n).ANALYSIS for n in names}


def _hooks(a: SourceAnalysis) -> list[tuple[str, Callable[..., object]]]:
    out = [(h, fn) for h in _HOOKS if (fn := getattr(a, h)) is not None]
    return out + [("causes", rule) for rule in a.causes]


def test_every_part_is_reached_and_each_hook_is_a_function_of_its_own_module() -> None:
    parts = _part_modules()
    assert set(parts.values()) == set(source_analyses())
    for module, a in parts.items():
        for hook, fn in _hooks(a):
            assert fn.__module__ == module, f"{module}: its {hook} hook is {fn.__module__}'s"
            short = module.removeprefix("slime_hangdoctor.analysis.").replace(".", "/")
            assert by_of(fn, hook).startswith(f"{short}:"), by_of(fn, hook)


def test_by_names_the_function_object_not_what_a_part_says() -> None:
    from slime_hangdoctor.analysis.parts import engines, stacks

    assert by_of(engines.suspects) == "parts/engines:suspects"
    assert by_of(stacks.peer_groups) == "parts/stacks:peer_groups"
    assert by_of(lambda r: r, "findings").endswith(":findings")  # a lambda: named by its hook
    assert PARSERS  # the specs' parts are reached through sources.ENTRIES too


def _resolves(by: str) -> bool:
    """`module:function` names a module under slime_hangdoctor.analysis and a function of it (or,
    for a part's hook written as a lambda, a hook of that part)."""
    module, _, name = by.partition(":")
    try:
        mod = importlib.import_module("slime_hangdoctor.analysis." + module.replace("/", "."))
    except ImportError:
        return False
    if callable(getattr(mod, name, None)):
        return True
    analysis = getattr(mod, "ANALYSIS", None)
    return isinstance(analysis, SourceAnalysis) and getattr(analysis, name, None) is not None


@pytest.mark.parametrize("name", sorted(BUNDLES))
def test_every_reason_finding_and_step_says_which_rule_made_it(name: str) -> None:
    v = analyse_bundle(BUNDLES[name]).diagnosis.verdict
    for c in v.culprits:
        assert len(c.by) == len(c.why.split(" | ")), c
        assert all(_resolves(b) for b in c.by), c.by
    for f in v.findings:
        assert f.by is not None and _resolves(f.by), (f.rule, f.by)
        assert len(set(f.evidence)) == len(f.evidence), f.evidence  # one line once
    for s in v.next_steps:
        assert s.by is not None and _resolves(s.by), (s.text, s.by)
