"""The one-way imports of docs/architecture.md ("Layout"), enforced on the source with an AST walk.

Every import of our own package counts, also the lazy ones inside functions. ALLOWED names, for each
part of the package (a top-level module or a sub-package), the parts it may import; a part not in the
table fails the test, so a new module must be placed in a layer (and in the docs) on purpose.

The layers say nothing of the modules inside one part: `cycles` walks the graph of module imports
of the whole package (the same imports, lazy and TYPE_CHECKING ones included, `from x import y`
counted as an import of module `x.y` when there is one) and names every cycle in it.

The demo is a distribution of its own (demo/slime_hangdoctor_demo): it imports nothing of the
doctor, it has no import cycle either, and the doctor reaches it from one place only, the `demo`
command of cli.py, inside a function (the doctor runs without it installed)."""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "slime_hangdoctor"
PKG = "slime_hangdoctor"
DEMO_PACKAGE = ROOT / "demo" / "slime_hangdoctor_demo"
DEMO_PKG = DEMO_PACKAGE.name
ARCHITECTURE = ROOT / "docs" / "architecture.md"

_BASE = frozenset({"errors", "outcome", "facts", "verdict", "redact", "safe_fs", "__init__"})
_FACTS = frozenset({"outcome", "facts"})
_BELOW_ANALYSIS = _BASE | {
    "bundle",
    "source_spec",
    "parsers",
    "sources",
    "snapshot",
    "load",
    "topology",
    "markers",
}

ALLOWED: dict[str, frozenset[str]] = {
    "__init__": frozenset(),
    "errors": frozenset(),
    "outcome": frozenset(),
    "facts": frozenset(),
    "verdict": frozenset(),
    "redact": frozenset(),
    "safe_fs": frozenset({"errors"}),
    "bundle": frozenset({"__init__", "errors", "redact", "safe_fs"}) | _FACTS,
    # a source's spec: the record it parses (a type only) and nothing else of ours
    "source_spec": frozenset({"bundle"}),
    # a parser module declares its source's SourceSpec (the bundle's name of the source)
    "parsers": frozenset({"errors", "bundle", "source_spec"}) | _FACTS,
    "sources": frozenset({"parsers", "source_spec"}),  # the one list of the sources' specs
    "snapshot": frozenset({"bundle", "parsers", "source_spec"}) | _FACTS,
    "load": frozenset(
        {"__init__", "errors", "bundle", "source_spec", "parsers", "sources", "snapshot"}
    )
    | _FACTS,
    "topology": frozenset({"parsers", "snapshot", "verdict"}) | _FACTS,
    "markers": frozenset({"parsers", "snapshot", "topology"}) | _FACTS,
    "analysis": frozenset(
        {"source_spec", "parsers", "sources", "snapshot", "topology", "verdict", "markers"}
    )
    | _FACTS,
    "render": frozenset({"__init__", "errors", "verdict", "redact"}),
    # not markers: what counts as work moving is the watchdog's policy (it judges for the collector)
    "collect": _BELOW_ANALYSIS - {"markers"},
    "pipeline": _BELOW_ANALYSIS | {"collect", "analysis"},
    "watchdog": _BELOW_ANALYSIS | {"collect", "analysis", "render", "pipeline"},
    "cli": _BELOW_ANALYSIS | {"collect", "analysis", "render", "pipeline", "watchdog"},
    "__main__": frozenset({"cli"}),
}


def part_of(module: str) -> str:
    """`slime_hangdoctor.collect.run` -> `collect`; the package itself -> `__init__`."""
    parts = module.split(".")
    assert parts[0] == PKG, module
    return parts[1] if len(parts) > 1 else "__init__"


def module_name(path: Path, package: Path) -> str:
    rel = path.relative_to(package.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def own_imports(
    source: str, module: str, package: Path, *, is_package: bool
) -> list[tuple[int, str]]:
    """(line, imported module) for every import of the package `package` (its folder) in `source`."""
    pkg = package.name
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == pkg]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor if is_package else anchor[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            if base.split(".")[0] != pkg:
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                target = sub if _is_module(sub, package) else base
                found.append((node.lineno, target))
    return found


def _is_module(dotted: str, package: Path) -> bool:
    path = package.parent.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def violations(files: list[Path], package: Path = PACKAGE) -> list[str]:
    bad: list[str] = []
    for path in files:
        module = module_name(path, package)
        part = part_of(module)
        if part not in ALLOWED:
            bad.append(
                f"{module}: not placed in a layer (add it to ALLOWED and docs/architecture.md)"
            )
            continue
        source = path.read_text()
        for line, target in own_imports(
            source, module, package, is_package=path.name == "__init__.py"
        ):
            to = part_of(target)
            if to != part and to not in ALLOWED[part]:
                bad.append(
                    f"{path.relative_to(package.parent)}:{line}: {part} may not import {to} ({target})"
                )
    return bad


def import_graph(files: list[Path], package: Path = PACKAGE) -> dict[str, dict[str, str]]:
    """Module -> {module it imports: where (`path:line` of the first such import)}."""
    graph: dict[str, dict[str, str]] = {}
    for path in files:
        module = module_name(path, package)
        edges = graph.setdefault(module, {})
        found = own_imports(
            path.read_text(), module, package, is_package=path.name == "__init__.py"
        )
        for line, target in found:
            if target != module:
                edges.setdefault(target, f"{path.relative_to(package.parent)}:{line}")
    return graph


def _cyclic_sets(graph: dict[str, dict[str, str]]) -> list[set[str]]:
    """The strongly connected sets of two modules or more (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, {}):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            members = set()
            while True:
                top = stack.pop()
                on_stack.discard(top)
                members.add(top)
                if top == node:
                    break
            if len(members) > 1:
                found.append(members)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _shortest_cycle(graph: dict[str, dict[str, str]], start: str, within: set[str]) -> list[str]:
    """The shortest import path from `start` back to itself, through `within` only."""
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for node in frontier:
            for nxt in sorted(graph.get(node, {})):
                if nxt not in within or nxt in came_from:
                    continue
                came_from[nxt] = node
                if nxt == start:
                    path = [start]
                    while path[-1] != start or len(path) == 1:
                        path.append(came_from[path[-1]])
                    return path[::-1]
                following.append(nxt)
        frontier = following
    raise AssertionError(f"{start} is on no cycle of {sorted(within)}")


def cycles(graph: dict[str, dict[str, str]]) -> list[str]:
    """Each import cycle, named with the import that closes each step: for every module on a cycle,
    the shortest cycle through it (a cycle found from two of its modules is named once)."""
    named: dict[tuple[str, ...], str] = {}
    for members in _cyclic_sets(graph):
        for start in sorted(members):
            ring = _shortest_cycle(graph, start, members)[:-1]
            least = ring.index(min(ring))
            ring = ring[least:] + ring[:least]  # told from its least module, once
            steps = [
                f"{a} -> {b} ({graph[a][b]})"
                for a, b in zip(ring, [*ring[1:], ring[0]], strict=True)
            ]
            named.setdefault(tuple(ring), "; ".join(steps))
    return sorted(named.values())


def _package_files() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _demo_files() -> list[Path]:
    """The demo's package, its job tree (job/: the slime-shaped tree Ray runs) included."""
    return sorted(DEMO_PACKAGE.rglob("*.py"))


def absolute_imports(source: str, top: str) -> list[tuple[int, str, bool]]:
    """(line, module, whether at module level) for every absolute import of the package `top`."""
    tree = ast.parse(source)
    in_functions = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        for inner in ast.walk(node)
    }
    found: list[tuple[int, str, bool]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module]
        else:
            continue
        found += [
            (node.lineno, name, id(node) not in in_functions)
            for name in names
            if name.split(".")[0] == top
        ]
    return found


def demo_violations(
    demo_files: list[Path],
    doctor_files: list[Path],
    demo: Path = DEMO_PACKAGE,
    package: Path = PACKAGE,
) -> list[str]:
    """The demo imports nothing of the doctor; the doctor imports the demo in cli.py only, inside
    a function (relative imports stay inside their own package: only absolute ones can cross)."""
    bad: list[str] = []
    for path in demo_files:
        where = path.relative_to(demo.parent)
        for line, target, _ in absolute_imports(path.read_text(), package.name):
            bad.append(f"{where}:{line}: the demo may not import the doctor ({target})")
    for path in doctor_files:
        where = path.relative_to(package.parent)
        for line, target, module_level in absolute_imports(path.read_text(), demo.name):
            if path != package / "cli.py":
                bad.append(f"{where}:{line}: only cli.py may import the demo ({target})")
            elif module_level:
                bad.append(
                    f"{where}:{line}: the demo imported at module level ({target}): "
                    "the doctor must run without the demo installed"
                )
    return bad


def test_every_import_follows_the_layers() -> None:
    assert violations(_package_files()) == []


def test_no_module_imports_itself_back() -> None:
    """No import cycle anywhere, inside a part too: a lazy import inside a function counts (it only
    hides the cycle from the interpreter until that function runs)."""
    assert cycles(import_graph(_package_files())) == []


# Inside analysis/: the readers (world, stacks, engines, progress, network, ...) below the contract of
# a part (source_analysis, merge), below the parts (analysis/parts/), below what composes them
# (advice, blame, waits, diagnosis, the package). A module imports only its own layer or those below.
def analysis_layer(module: str) -> int | None:
    prefix = f"{PKG}.analysis"
    if module != prefix and not module.startswith(prefix + "."):
        return None
    rest = module[len(prefix) :].lstrip(".")
    if rest == "parts" or rest.startswith("parts."):
        return 2
    if rest in ("source_analysis", "merge"):
        return 1
    if rest in ("advice", "blame", "waits", "diagnosis", ""):
        return 3
    return 0


def climbing(graph: dict[str, dict[str, str]]) -> list[str]:
    """Every import inside analysis/ of a module of a higher inner layer."""
    out = []
    for module, edges in sorted(graph.items()):
        here = analysis_layer(module)
        if here is None:
            continue
        for target, where in edges.items():
            there = analysis_layer(target)
            if there is not None and there > here:
                out.append(f"{where}: {module} imports {target}, above it")
    return out


def test_nothing_in_analysis_climbs_back_up() -> None:
    """Type-only imports count too: the contract of a part imports no part."""
    assert climbing(import_graph(_package_files())) == []


# The parts a planted analysis wing always has: its package, the world and the parts' package.
_WING = {"analysis/__init__.py": "", "analysis/world.py": "", "analysis/parts/__init__.py": ""}


def planted(
    tmp_path: Path, rule: Callable[[dict[str, dict[str, str]]], list[str]], files: dict[str, str]
) -> list[str]:
    """What `rule` finds in a fake package of the analysis wing plus `files` (path -> source):
    each rule's check that it can fail plants the import it must catch."""
    package, paths = _fake_package(tmp_path, {**_WING, **files})
    return rule(import_graph(paths, package))


def test_the_climb_check_can_fail(tmp_path: Path) -> None:
    found = planted(
        tmp_path,
        climbing,
        {
            "analysis/parts/x.py": "from slime_hangdoctor.analysis import world\n",
            "analysis/source_analysis.py": "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from slime_hangdoctor.analysis.parts import x\n",
        },
    )
    assert (
        len(found) == 1 and "source_analysis imports slime_hangdoctor.analysis.parts.x" in found[0]
    )


def part_name(module: str) -> str | None:
    """`...analysis.parts.rollout.lost_requests` -> `rollout`; None outside analysis/parts/."""
    prefix = f"{PKG}.analysis.parts."
    return module[len(prefix) :].split(".", maxsplit=1)[0] if module.startswith(prefix) else None


def between_parts(graph: dict[str, dict[str, str]]) -> list[str]:
    """Every import of one part by another (a part is a module or a package of analysis/parts/): a
    part reads the readers, the world and the contract; what two parts share is a reader
    (docs/architecture.md, "The analysis wing")."""
    out = []
    for module, edges in sorted(graph.items()):
        here = part_name(module)
        if here is None:
            continue
        for target, where in edges.items():
            there = part_name(target)
            if there is not None and there != here:
                out.append(f"{where}: part {here} imports part {there} ({target})")
    return out


def test_no_part_imports_another_part() -> None:
    assert between_parts(import_graph(_package_files())) == []


COMPOSER = ("diagnosis", "advice", "blame", "waits", "merge", "source_analysis", "")


def composer_reaches(graph: dict[str, dict[str, str]]) -> list[str]:
    """Every import of a part by the composer or the contract: they reach the parts through the
    registry only (source_analysis.source_analyses and its hooks)."""
    composer = {f"{PKG}.analysis" + (f".{m}" if m else "") for m in COMPOSER}
    return [
        f"{where}: {module} imports part {part_name(target)} ({target})"
        for module, edges in sorted(graph.items())
        if module in composer
        for target, where in edges.items()
        if part_name(target) is not None
    ]


def test_the_composer_reaches_the_parts_through_the_registry_only() -> None:
    assert composer_reaches(import_graph(_package_files())) == []


# the readers the contract may import: the progress vocabulary, no reader of a source
CONTRACT_READERS = frozenset({f"{PKG}.analysis.readers.proof"})


def contract_sources(graph: dict[str, dict[str, str]]) -> list[str]:
    """Every import of a source's reader by the contract (issue 44: one way in to the engines'
    reads, `read_engines(world)`, not a field of `Reads` typed by one source)."""
    edges = graph.get(f"{PKG}.analysis.source_analysis", {})
    return [
        f"{where}: the contract imports {target}"
        for target, where in sorted(edges.items())
        if target.startswith(f"{PKG}.analysis.readers") and target not in CONTRACT_READERS
    ]


def test_the_contract_imports_no_source() -> None:
    assert contract_sources(import_graph(_package_files())) == []


def test_the_contract_rule_can_fail(tmp_path: Path) -> None:
    (found,) = planted(
        tmp_path,
        contract_sources,
        {
            "analysis/readers/__init__.py": "",
            "analysis/readers/proof.py": "",
            "analysis/readers/sglang_http.py": "",
            "analysis/source_analysis.py": "from slime_hangdoctor.analysis.readers import proof\n"
            "from slime_hangdoctor.analysis.readers.sglang_http import EngineRead\n",
        },
    )
    assert found.endswith("imports slime_hangdoctor.analysis.readers.sglang_http"), found


def test_the_part_rule_can_fail(tmp_path: Path) -> None:
    parts = {
        "analysis/parts/x.py": "from slime_hangdoctor.analysis import world\n",
        "analysis/parts/y/__init__.py": "from slime_hangdoctor.analysis.parts.y import z\n",
        "analysis/parts/y/z.py": "from slime_hangdoctor.analysis.parts import x\n",
    }
    found = planted(tmp_path / "between", between_parts, parts)
    assert len(found) == 1 and "part y imports part x" in found[0], found
    composer = {"analysis/diagnosis.py": "from slime_hangdoctor.analysis.parts import x\n"}
    reached = planted(tmp_path / "composer", composer_reaches, {**parts, **composer})
    assert len(reached) == 1 and "imports part x" in reached[0], reached


def names_twice(root: Path) -> list[str]:
    """Module names (a file's stem, a package's folder) that stand more than once below `root`:
    each module of the analysis wing is named by what it does, once (issue 44)."""
    seen: dict[str, list[str]] = {}
    for f in sorted(root.rglob("*.py")):
        name = f.parent.name if f.name == "__init__.py" else f.stem
        if f.parent != root or f.name != "__init__.py":
            seen.setdefault(name, []).append(str(f.relative_to(root)))
    return [f"{n}: {', '.join(w)}" for n, w in sorted(seen.items()) if len(w) > 1]


def test_no_module_name_stands_twice_in_the_analysis() -> None:
    assert names_twice(PACKAGE / "analysis") == []


def test_the_name_check_can_fail(tmp_path: Path) -> None:
    for rel in (
        "__init__.py",
        "ray.py",
        "parts/__init__.py",
        "parts/ray.py",
        "parts/x/__init__.py",
    ):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    (tmp_path / "x.py").write_text("")
    assert names_twice(tmp_path) == ["ray: parts/ray.py, ray.py", "x: parts/x/__init__.py, x.py"]


def test_the_demo_and_the_doctor_import_one_way() -> None:
    """The demo's distribution stands alone (Ray runs its job tree with its own folder as working
    dir); the doctor's `demo` command is its one door, opened only when that command runs."""
    assert _demo_files(), DEMO_PACKAGE
    assert demo_violations(_demo_files(), _package_files()) == []


def test_no_demo_module_imports_itself_back() -> None:
    assert cycles(import_graph(_demo_files(), DEMO_PACKAGE)) == []


@pytest.mark.parametrize(
    ("where", "source", "expected"),
    [
        (
            "demo:launch.py",
            "from slime_hangdoctor.verdict import Status\n",
            "slime_hangdoctor_demo/launch.py:1: the demo may not import the doctor",
        ),
        (  # the job tree too, also lazily
            "demo:job/slime/ray/rollout.py",
            "def f():\n    import slime_hangdoctor.cli\n",
            "the demo may not import the doctor (slime_hangdoctor.cli)",
        ),
        (
            "doctor:collect/x.py",
            "def f():\n    from slime_hangdoctor_demo import launch\n",
            "slime_hangdoctor/collect/x.py:2: only cli.py may import the demo",
        ),
        (
            "doctor:cli.py",
            "from slime_hangdoctor_demo.faults import FAULTS\n",
            "the demo imported at module level (slime_hangdoctor_demo.faults)",
        ),
        ("doctor:cli.py", "def f():\n    from slime_hangdoctor_demo.faults import FAULTS\n", None),
        ("demo:faults.py", "from slime_hangdoctor_demo.sglang_server import X\n", None),
    ],
)
def test_the_demo_check_catches_a_wrong_import(
    tmp_path: Path, where: str, source: str, expected: str | None
) -> None:
    """The demo check itself can fail: a crossing import planted in a copy of either package is
    named, and the allowed ones pass."""
    demo, package = tmp_path / DEMO_PKG, tmp_path / PKG
    side, rel = where.split(":")
    target = (demo if side == "demo" else package) / rel
    target.parent.mkdir(parents=True)
    target.write_text(source)
    demo_files, doctor_files = ([target], []) if side == "demo" else ([], [target])
    found = demo_violations(demo_files, doctor_files, demo, package)
    if expected is None:
        assert found == []
    else:
        assert len(found) == 1 and expected in found[0], found


def test_every_layer_is_in_the_architecture_doc() -> None:
    text = ARCHITECTURE.read_text()
    layout = text.split("## Layout", 1)[1].split("```")[1]
    for part in ALLOWED:
        if part in ("__init__", "__main__"):
            continue
        assert f" {part}.py" in layout or f" {part}/" in layout, f"{part} missing from the layout"


@pytest.mark.parametrize(
    ("where", "source", "expected"),
    [
        (
            "parsers/x.py",
            "from slime_hangdoctor.collect.http import get\n",
            "parsers may not import collect",
        ),
        (
            "analysis/x.py",
            "def f():\n    from slime_hangdoctor import load\n",
            "analysis may not import load",
        ),
        ("facts.py", "import slime_hangdoctor.verdict\n", "facts may not import verdict"),
        ("render/x.py", "from ..analysis import rules\n", "render may not import analysis"),
    ],
)
def test_the_check_catches_a_wrong_import(
    tmp_path: Path, where: str, source: str, expected: str
) -> None:
    """The check itself can fail: a forbidden import, in a file placed in a copy of the layout, is found."""
    package = tmp_path / PKG
    for sub in ("collect", "analysis", "parsers", "render"):
        (package / sub).mkdir(parents=True)
        (package / sub / "__init__.py").write_text("")
    for mod in ("__init__", "load", "verdict", "facts"):
        (package / f"{mod}.py").write_text("")
    target = package / where
    target.write_text(source)
    found = violations([target], package)
    assert any(expected in v for v in found), found


def _fake_package(tmp_path: Path, sources: dict[str, str]) -> tuple[Path, list[Path]]:
    package = tmp_path / PKG
    files = []
    for where, source in {"__init__.py": "", **sources}.items():
        path = package / where
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
        files.append(path)
    return package, files


@pytest.mark.parametrize(
    ("sources", "expected"),
    [
        (  # hidden in a function, as collect/options.py hid its import of collect/dashboard.py
            {
                "collect/__init__.py": "",
                "collect/options.py": "def f():\n    from slime_hangdoctor.collect import dash\n",
                "collect/dash.py": "from slime_hangdoctor.collect.node import g\n",
                "collect/node.py": "from .options import f\n",
            },
            [
                "slime_hangdoctor.collect.dash -> slime_hangdoctor.collect.node "
                "(slime_hangdoctor/collect/dash.py:1); "
                "slime_hangdoctor.collect.node -> slime_hangdoctor.collect.options "
                "(slime_hangdoctor/collect/node.py:1); "
                "slime_hangdoctor.collect.options -> slime_hangdoctor.collect.dash "
                "(slime_hangdoctor/collect/options.py:2)"
            ],
        ),
        (  # two cycles through one module: each is named
            {
                "a.py": "import slime_hangdoctor.b\nimport slime_hangdoctor.c\n",
                "b.py": "from slime_hangdoctor import a\n",
                "c.py": "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from slime_hangdoctor.a import X\n",
            },
            [
                "slime_hangdoctor.a -> slime_hangdoctor.b (slime_hangdoctor/a.py:1); "
                "slime_hangdoctor.b -> slime_hangdoctor.a (slime_hangdoctor/b.py:1)",
                "slime_hangdoctor.a -> slime_hangdoctor.c (slime_hangdoctor/a.py:2); "
                "slime_hangdoctor.c -> slime_hangdoctor.a (slime_hangdoctor/c.py:3)",
            ],
        ),
        (  # one-way: a name imported from a package's __init__ is an import of the package
            {
                "p/__init__.py": "from slime_hangdoctor.p.m import X\n",
                "p/m.py": "from slime_hangdoctor.q import Y\nX = 1\n",
                "q.py": "Y = 2\n",
                "r.py": "from slime_hangdoctor.p import X, m\n",
            },
            [],
        ),
    ],
)
def test_the_check_names_every_cycle(
    tmp_path: Path, sources: dict[str, str], expected: list[str]
) -> None:
    """The cycle check itself can fail: cycles planted in a copy of the layout are named, with the
    line of each import on them, and a one-way graph passes."""
    package, files = _fake_package(tmp_path, sources)
    assert cycles(import_graph(files, package)) == expected
