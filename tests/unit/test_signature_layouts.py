"""Every row of the stage tables, and every class of the slime actor table, names something real
(issue 24 item 1).

tests/fixtures/layouts/*.json.gz are the (file, function) pairs of the real trees the tables point at
(slime at the January 2026 and August 2026 commits, miles, Megatron-LM, the SGLang 0.5.15.post1 wheel,
torch 2.13.0, sympy, math-verify, latex2sympy2), extracted by scripts/extract_layout_functions.py
(provenance: tests/fixtures/layouts/README.md). A frame row must match a real function in a real
file (its file pattern, its class and its function name, all three; a wildcard row: a real file
under its pattern), in at least one tree; a Ray method row, a real method of that class."""

from __future__ import annotations

import gzip
import json
from functools import cache
from pathlib import Path

import pytest

from slime_hangdoctor.analysis.signatures import (
    ANY,
    LAYOUTS,
    FrameSig,
    MethodSig,
    file_matches,
    split_name,
)
from slime_hangdoctor.facts import Frame
from slime_hangdoctor.topology import CLASS_ROLES, SLIME_ACTOR_CLASSES, SLIME_ACTORS, SlimeActor
from slime_hangdoctor.verdict import Role

LAYOUT_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "layouts"


@cache
def trees() -> dict[str, dict[str, list[str]]]:
    out: dict[str, dict[str, list[str]]] = {}
    for path in sorted(LAYOUT_DIR.glob("*.json.gz")):
        doc = json.loads(gzip.decompress(path.read_bytes()))
        out[path.name.removesuffix(".json.gz")] = doc["files"]
    return out


def _frame_rows() -> list[FrameSig]:
    return list(dict.fromkeys(s for layout in LAYOUTS.values() for s in layout.frames))


def _method_rows() -> list[MethodSig]:
    return list(dict.fromkeys(m for layout in LAYOUTS.values() for m in layout.methods))


def real_matches(sig: FrameSig, only: str | None = None) -> list[str]:
    """`tree: file:qualname` of every real function the row matches (file, class and name), in
    every tree or in tree `only`."""
    hits: list[str] = []
    for tree, files in trees().items():
        if only is not None and tree != only:
            continue
        for path, names in files.items():
            frame = Frame(name="", filename=path, short_filename=path)
            if sig.file is not None and not file_matches(sig.file, frame):
                continue
            if sig.func == ANY:
                hits.append(f"{tree}: {path}")
                continue
            for qual in names:
                owner, func = split_name(qual)
                if func == sig.func and (sig.cls is None or owner == sig.cls):
                    hits.append(f"{tree}: {path}:{qual}")
    return hits


def test_the_extracted_trees_are_there() -> None:
    assert {"slime-2026-01", "slime-2026-08", "miles-2026-08", "sglang-0.5.15.post1"} <= set(
        trees()
    )
    assert "RolloutManager.generate" in trees()["slime-2026-08"]["slime/ray/rollout.py"]


@pytest.mark.parametrize("sig", _frame_rows(), ids=lambda s: f"{s.cls or ''}.{s.func}@{s.file}")
def test_every_frame_row_names_a_real_function(sig: FrameSig) -> None:
    assert real_matches(sig), f"{sig} names no function of any listed tree"


@cache
def bases() -> dict[str, dict[str, list[str]]]:
    out: dict[str, dict[str, list[str]]] = {}
    for path in sorted(LAYOUT_DIR.glob("*.json.gz")):
        doc = json.loads(gzip.decompress(path.read_bytes()))
        out[path.name.removesuffix(".json.gz")] = doc.get("bases", {})
    return out


def _lineage(tree: str, cls: str) -> list[str]:
    """`cls` and its base classes in `tree`, by name (Ray titles an inherited method with the
    actor's own class: `ray::MegatronTrainRayActor.set_rollout_manager` runs TrainRayActor's)."""
    out: list[str] = []
    todo = [cls]
    while todo:
        name = todo.pop(0)
        if name not in out:
            out.append(name)
            todo.extend(bases()[tree].get(name, []))
    return out


@pytest.mark.parametrize("sig", _method_rows(), ids=lambda m: f"{m.cls}.{m.method}")
def test_every_method_row_names_a_real_method(sig: MethodSig) -> None:
    found = [
        f"{tree}: {path}"
        for tree, files in trees().items()
        for path, names in files.items()
        if any(split_name(q) in {(c, sig.method) for c in _lineage(tree, sig.cls)} for q in names)
    ]
    assert found, f"{sig} names no method of any listed tree"


# Each layout's own tree (tests/fixtures/layouts/README.md): a row on the layout's own package
# names a function of that tree, not merely of another layout's.
OWN_TREE = {
    "2026-01": "slime-2026-01",
    "2026-08": "slime-2026-08",
    "miles-2026-08": "miles-2026-08",
    "slime-next": "slime-next",
}


def _own_rows() -> list[tuple[str, FrameSig]]:
    return [
        (name, sig)
        for name, layout in LAYOUTS.items()
        for sig in layout.frames
        if sig.file is not None and sig.file.startswith(("slime/", "miles/"))
    ]


def test_every_layout_has_its_tree() -> None:
    assert set(LAYOUTS) == set(OWN_TREE)
    assert LAYOUTS["miles-2026-08"].source.startswith("radixark/miles@31f1ca961")
    assert all(s.file.startswith("miles/") for _, s in _own_rows() if _ == "miles-2026-08")  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("layout", "sig"),
    _own_rows(),
    ids=lambda v: v if isinstance(v, str) else f"{v.cls}.{v.func}@{v.file}",
)
def test_every_layout_row_names_a_function_of_its_own_tree(layout: str, sig: FrameSig) -> None:
    hits = real_matches(sig, only=OWN_TREE[layout])
    assert hits, f"{layout}: {sig} names no function of {OWN_TREE[layout]}"


# --------------------------------------------------------------------------- the actor table


@cache
def tree_sources() -> dict[str, str]:
    """tree -> the `owner/name @ commit` it was read from."""
    return {
        path.name.removesuffix(".json.gz"): json.loads(gzip.decompress(path.read_bytes()))["source"]
        for path in sorted(LAYOUT_DIR.glob("*.json.gz"))
    }


def classes_defined(tree: str, path: str) -> set[str]:
    """The classes (qualified, as Ray names an actor class) with a listed method in `path`."""
    return {q.rsplit(".", 1)[0] for q in trees()[tree].get(path, []) if "." in q}


@pytest.mark.parametrize("actor", SLIME_ACTORS, ids=lambda a: a.cls)
def test_every_actor_class_is_a_real_class_of_its_file(actor: SlimeActor) -> None:
    """A slime actor class of the table is defined in the file it names, in the tree read at the
    commit it names: a misspelt class, a wrong file or a wrong commit fails."""
    read_at = [
        t for t, src in tree_sources().items() if src.split(" @ ")[-1].startswith(actor.commit)
    ]
    assert read_at, f"{actor}: no tree of tests/fixtures/layouts was read at {actor.commit}"
    found = [t for t in read_at if actor.cls in classes_defined(t, actor.file)]
    assert found, f"{actor.cls} is no class of {actor.file} in {read_at}"


def test_the_actor_table_has_each_class_once_with_its_role() -> None:
    names = [a.cls for a in SLIME_ACTORS]
    assert len(names) == len(set(names))
    assert set(SLIME_ACTOR_CLASSES) == set(names)
    # the classes of slime main that issue 24 names, with the role each plays
    assert {c: CLASS_ROLES.get(c) for c in ("SampleManager", "FSDPTrainRayActor", "Lock")} == {
        "SampleManager": Role.ROLLOUT_MANAGER,
        "FSDPTrainRayActor": Role.TRAIN_RANK,
        "Lock": None,
    }
