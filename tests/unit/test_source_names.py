"""analysis/source.py's table of a source's three names (bundle, analysis, finder) is complete and
true: it names every bundle source, every analysis `Source` and every finder, and on the recorded
bundles each finder gives only the analysis sources its rows say."""

from __future__ import annotations

import importlib
from collections import Counter
from pathlib import Path
from typing import get_args

import pytest

from slime_hangdoctor.analysis.engines import read_engines
from slime_hangdoctor.analysis.progress import assess
from slime_hangdoctor.analysis.source import NOT_WEIGHED, SOURCE_NAMES, Source
from slime_hangdoctor.analysis.source_analysis import source_analyses
from slime_hangdoctor.analysis.suspects import EVIDENCE_FINDERS, SUSPECT_FINDERS, reads_of
from slime_hangdoctor.analysis.world import build_world
from slime_hangdoctor.bundle import open_bundle
from slime_hangdoctor.load import load_snapshot
from slime_hangdoctor.sources import SPECS
from slime_hangdoctor.topology import build_topology
from tests.unit.test_golden_verdicts import recorded_bundles


def test_every_analysis_source_has_one_row() -> None:
    names = Counter(row.analysis for row in SOURCE_NAMES)
    assert set(names) == set(get_args(Source))
    assert max(names.values()) == 1


def test_every_row_reads_listed_sources_and_every_weighed_source_has_a_row() -> None:
    """A row names only sources of sources.SPECS; a source whose analysis names suspects or hang
    evidence (a SourceAnalysis hook) is weighed, so it needs a row. A source that only adds
    findings (the logs, the pressure source) or only finds who is who (the log heads) needs none."""
    names = {spec.name for spec in SPECS}
    read = {name for row in SOURCE_NAMES for name in row.bundle}
    assert read <= names
    assert set(NOT_WEIGHED) <= names and not read & set(NOT_WEIGHED)
    weighed = {
        spec.name
        for spec in SPECS
        if spec.analysis is not None
        and any(
            a.suspects is not None or a.evidence is not None
            for a in source_analyses()
            if a is importlib.import_module(spec.analysis).ANALYSIS
        )
    }
    assert weighed <= read


def test_every_finder_is_in_the_table() -> None:
    finders = {f.name for f in SUSPECT_FINDERS} | {f.name for f in EVIDENCE_FINDERS}
    assert {name for row in SOURCE_NAMES for name in row.finders} == finders


@pytest.mark.parametrize("name", sorted(recorded_bundles()))
def test_each_finder_gives_the_sources_the_table_says(name: str) -> None:
    path: Path = recorded_bundles()[name]
    with open_bundle(path) as opened:
        snapshot = load_snapshot(opened)
    world = build_world(snapshot, build_topology(snapshot))
    engines = read_engines(world)
    reads = reads_of(world, engines, assess(world, engines))
    allowed = {
        finder: {row.analysis for row in SOURCE_NAMES if finder in row.finders}
        for finder in {n for row in SOURCE_NAMES for n in row.finders}
    }
    suspects = []
    for suspect_finder in SUSPECT_FINDERS:
        found = suspect_finder.find(reads)
        suspects += found
        assert {s.source for s in found} <= allowed[suspect_finder.name], suspect_finder.name
    for evidence_finder in EVIDENCE_FINDERS:
        given = {e.source for e in evidence_finder.find(reads, suspects)}
        assert given <= allowed[evidence_finder.name], evidence_finder.name
