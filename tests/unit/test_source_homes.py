"""A source is its own modules and one line elsewhere (issue 33): the kernel's and the logs' sources,
counted as tests/unit/test_source_pressure.py counts pressure's. Each keeps its name and fact types
in its parser module, its reading in its collector, its part of the diagnosis in analysis/parts/;
outside them, only its line of sources.py names it.

A reference is code, read from the syntax tree: an import of one of the source's modules, a string
that names one of them (a spec's `node_probe`, an entry of sources.ENTRIES), or the source's name
as a string. Comments and docstrings are not references (the kernel serves as the example in a few
docstrings), nor are the words "kernel" or "logs" in other senses (a CUDA kernel, a log line)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "slime_hangdoctor"

SOURCES: dict[str, tuple[str, str]] = {  # source -> (its modules' stem, its name)
    "kernel": ("kernel", "kernel"),
    "logs": ("logs", "ray_logs"),
    "pressure": ("pressure", "pressure"),
}


def own_modules(stem: str) -> dict[str, str]:
    """path -> dotted name of the source's parser, collector and part."""
    return {
        f"slime_hangdoctor/{where}/{stem}.py": f"slime_hangdoctor.{where.replace('/', '.')}.{stem}"
        for where in ("parsers", "collect", "analysis/parts")
    }


def _docstrings(tree: ast.AST) -> set[int]:
    found: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                found.add(id(value))
    return found


def references(source: str, modules: set[str], name: str) -> list[int]:
    """The lines of `source` whose code names one of `modules` or the source's `name`."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    packages = {m.rpartition(".")[0]: m.rpartition(".")[2] for m in modules}
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name in modules for a in node.names):
            lines.add(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            stem = packages.get(node.module)
            if node.module in modules or any(a.name == stem for a in node.names):
                lines.add(node.lineno)
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docs
            and (node.value == name or any(m in node.value for m in modules))
        ):
            lines.add(node.lineno)
    return sorted(lines)


def mentions(stem: str, name: str, package: Path = PACKAGE) -> dict[str, int]:
    own = own_modules(stem)
    found: dict[str, int] = {}
    for path in sorted(package.rglob("*.py")):
        rel = str(path.relative_to(package.parent))
        if rel in own:
            continue
        if n := len(references(path.read_text(), set(own.values()), name)):
            found[rel] = n
    return found


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_a_source_touches_one_line_outside_its_own_modules(source: str) -> None:
    stem, name = SOURCES[source]
    assert mentions(stem, name) == {"slime_hangdoctor/sources.py": 1, **ALSO.get(source, {})}


# Known exceptions, each with its reason (to be moved behind the source's own part): the known-cause
# matcher reads the engines' weight-update group joins from SGLang's log lines (issue 45 item 4,
# analysis/known_case.py `engine_joins`: its spec and GroupJoin imports), and a part may not import
# another part, so it cannot ask parts/logs.py for them.
ALSO: dict[str, dict[str, int]] = {"logs": {"slime_hangdoctor/analysis/known_case.py": 2}}


def test_the_count_sees_an_import_a_module_path_and_the_name(tmp_path: Path) -> None:
    package = tmp_path / "slime_hangdoctor"
    (package / "analysis").mkdir(parents=True)
    (package / "analysis" / "world.py").write_text(
        '"""the kernel of analysis/parts/kernel.py (a docstring)"""\n'
        "from slime_hangdoctor.parsers.kernel import NodeKernel\n"
        "from slime_hangdoctor.analysis.parts import kernel\n"
        "SOURCE = 'kernel'  # a comment naming slime_hangdoctor.collect.kernel\n"
        "PROBE = 'slime_hangdoctor.collect.kernel'\n"
        "OTHER = 'kernel_spin'\n"
    )
    assert mentions("kernel", "kernel", package) == {"slime_hangdoctor/analysis/world.py": 4}
