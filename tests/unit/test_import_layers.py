"""The one-way imports of docs/architecture.md ("Layout"), enforced on the source with an AST walk.

Every import of our own package counts, also the lazy ones inside functions. ALLOWED names, for each
part of the package (a top-level module or a sub-package), the parts it may import; a part not in the
table fails the test, so a new module must be placed in a layer (and in the docs) on purpose."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "slime_hangdoctor"
PKG = "slime_hangdoctor"
ARCHITECTURE = ROOT / "docs" / "architecture.md"

_BASE = frozenset({"errors", "facts", "verdict", "redact", "safe_fs", "__init__"})
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
    "facts": frozenset(),
    "verdict": frozenset(),
    "redact": frozenset(),
    "safe_fs": frozenset({"errors"}),
    "bundle": frozenset({"__init__", "errors", "facts", "redact", "safe_fs"}),
    # a source's spec: the record it parses (a type only) and nothing else of ours
    "source_spec": frozenset({"bundle"}),
    # a parser module declares its source's SourceSpec (the bundle's name of the source)
    "parsers": frozenset({"errors", "facts", "bundle", "source_spec"}),
    "sources": frozenset({"parsers", "source_spec"}),  # the one list of the sources' specs
    "snapshot": frozenset({"facts", "bundle", "parsers", "source_spec"}),
    "load": frozenset(
        {"__init__", "errors", "facts", "bundle", "source_spec", "parsers", "sources", "snapshot"}
    ),
    "topology": frozenset({"facts", "parsers", "snapshot", "verdict"}),
    "markers": frozenset({"facts", "parsers", "snapshot", "topology"}),
    "analysis": frozenset(
        {"facts", "source_spec", "parsers", "sources", "snapshot", "topology", "verdict", "markers"}
    ),
    "render": frozenset({"__init__", "errors", "verdict"}),
    "collect": _BELOW_ANALYSIS,
    "pipeline": _BELOW_ANALYSIS | {"collect", "analysis"},
    "watchdog": _BELOW_ANALYSIS | {"collect", "analysis", "render", "pipeline"},
    "demo": frozenset(),  # standalone: submitted to Ray with its own folder as working dir
    "cli": _BELOW_ANALYSIS | {"collect", "analysis", "render", "pipeline", "watchdog", "demo"},
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
    """(line, imported module) for every import of our package in `source`."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == PKG]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor if is_package else anchor[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            if base.split(".")[0] != PKG:
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


def _package_files() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_every_import_follows_the_layers() -> None:
    assert violations(_package_files()) == []


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
        (
            "demo/x.py",
            "from slime_hangdoctor.verdict import Status\n",
            "demo may not import verdict",
        ),
        ("render/x.py", "from ..analysis import rules\n", "render may not import analysis"),
    ],
)
def test_the_check_catches_a_wrong_import(
    tmp_path: Path, where: str, source: str, expected: str
) -> None:
    """The check itself can fail: a forbidden import, in a file placed in a copy of the layout, is found."""
    package = tmp_path / PKG
    for sub in ("collect", "analysis", "parsers", "render", "demo"):
        (package / sub).mkdir(parents=True)
        (package / sub / "__init__.py").write_text("")
    for mod in ("__init__", "load", "verdict", "facts"):
        (package / f"{mod}.py").write_text("")
    target = package / where
    target.write_text(source)
    found = violations([target], package)
    assert any(expected in v for v in found), found
