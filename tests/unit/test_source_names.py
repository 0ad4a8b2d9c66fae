"""The typed names of the sources of evidence (analysis/source.py `Source`): each is made once, by the
module that reads its evidence, as a module constant; every part of the diagnosis declares the names
it gives (`SourceAnalysis.gives`), and on the recorded bundles each part gives only those."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from slime_hangdoctor.analysis.source import Source
from slime_hangdoctor.analysis.source_analysis import Reads, assess, source_analyses
from slime_hangdoctor.analysis.world import build_world
from slime_hangdoctor.bundle import open_bundle
from slime_hangdoctor.load import load_snapshot
from slime_hangdoctor.topology import build_topology
from tests.unit.test_golden_verdicts import recorded_bundles

ANALYSIS = Path(__file__).resolve().parents[2] / "slime_hangdoctor" / "analysis"


def made_names(root: Path = ANALYSIS) -> dict[str, list[str]]:
    """Each `Source("name")` call under `root`: name -> where (`path:line`), and fail on one that
    is not a module constant (`NAME = Source("name")`)."""
    found: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text())
        constants = {
            id(node.value)
            for node in tree.body
            if isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id.isupper()
        }
        for node in ast.walk(tree):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "Source"
            ):
                continue
            where = f"{path.relative_to(root)}:{node.lineno}"
            assert id(node) in constants, f"{where}: a Source is made as a module constant"
            (arg,) = node.args
            assert isinstance(arg, ast.Constant) and isinstance(arg.value, str), where
            found.setdefault(arg.value, []).append(where)
    return found


def test_each_name_is_made_once() -> None:
    made = made_names()
    assert {name: len(where) for name, where in made.items() if len(where) > 1} == {}
    assert len(made) >= 17


def test_every_part_gives_made_names_and_every_name_is_given() -> None:
    made = set(made_names())
    given = {name for part in source_analyses() for name in part.gives}
    assert given <= made
    assert made <= given, f"names no part gives: {sorted(made - given)}"


def test_the_check_catches_a_second_or_loose_name(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text('A = Source("x")\n')
    (tmp_path / "b.py").write_text('B = Source("x")\n')
    assert made_names(tmp_path) == {"x": ["a.py:1", "b.py:1"]}
    (tmp_path / "c.py").write_text('def f():\n    return Source("y")\n')
    with pytest.raises(AssertionError, match="module constant"):
        made_names(tmp_path)


@pytest.mark.parametrize("name", sorted(recorded_bundles()))
def test_each_part_gives_only_the_names_it_declares(name: str) -> None:
    path: Path = recorded_bundles()[name]
    with open_bundle(path) as opened:
        snapshot = load_snapshot(opened)
    world = build_world(snapshot, build_topology(snapshot))
    reads = Reads(world, assess(world))
    suspects = []
    for part in source_analyses():
        declared: set[Source] = set(part.gives)
        found = part.suspects(reads) if part.suspects else []
        suspects += found
        assert {s.source for s in found} <= declared, part
        if part.progress:
            moved = part.progress(world)
            signals = (*moved.progress, *moved.activity, *moved.frozen)
            assert {s.source for s in signals} <= declared, part
    for part in source_analyses():
        if part.evidence:
            assert {e.source for e in part.evidence(reads, suspects)} <= set(part.gives), part
