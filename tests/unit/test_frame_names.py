"""Every frame name the doctor compares lives in `analysis/signatures/` (issue 44 item 4): no module
outside the package compares a string literal with a frame's function name.

What counts as a frame's function name: `split_name(...)` (or an index of it), and an attribute
`function`, `func` (a row's or py-spy's function) or `name` of a frame (a receiver called `frame`,
`*frame`, `inner`, `top`, `fr` or `sf`). What counts as a literal: a `str` constant, a set / tuple /
list / frozenset of them, or a module-level name bound to one of those. The comparisons: `==`, `!=`,
`in`, `not in`, and the `funcs` set handed to `threads_with` (what a known cause matches on).

The check is shown to fail on the product's own modules with the package's constants written back
in as their values (`inline_signature_constants`): stacks.py as it was before the move compared
`"_pull_raw_reqs"` itself.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "slime_hangdoctor"
SIGNATURES = PACKAGE / "analysis" / "signatures"
SIGNATURES_MODULE = "slime_hangdoctor.analysis.signatures"

_FUNC_ATTRS = frozenset({"function", "func"})
# (`f` is left out: a dataclass field's `f.name` is compared with option names in collect/run.py)
_FRAME_RECEIVERS = frozenset({"frame", "inner", "top", "fr", "sf"})
_OPS = (ast.Eq, ast.NotEq, ast.In, ast.NotIn)


def _receiver(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _is_frame_function(node: ast.expr) -> bool:
    """`split_name(...)[i]`, `split_name(...)`, `x.function`, `x.func`, `frame.name`."""
    if isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Call):
        return _receiver(node.func) == "split_name"
    if isinstance(node, ast.Attribute):
        if node.attr in _FUNC_ATTRS:
            return True
        recv = _receiver(node.value)
        return node.attr == "name" and (recv in _FRAME_RECEIVERS or recv.endswith("frame"))
    return False


def _literal_strings(node: ast.expr, bound: dict[str, list[str]]) -> list[str]:
    """The str constants `node` is (a constant, a collection of them, a module-level name)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Name):
        return bound.get(node.id, [])
    if isinstance(node, ast.Subscript):  # `_FORK_ENTRY[0]`: any of the bound strings
        return _literal_strings(node.value, bound)
    if isinstance(node, ast.Call) and _receiver(node.func) in ("frozenset", "set", "tuple"):
        return [s for a in node.args for s in _literal_strings(a, bound)]
    if isinstance(node, (ast.Set, ast.Tuple, ast.List)):
        found = [_literal_strings(e, bound) for e in node.elts]
        return [s for one in found for s in one] if found and all(found) else []
    return []


def _module_literals(tree: ast.Module) -> dict[str, list[str]]:
    """Module-level names bound to str constants or collections of them."""
    bound: dict[str, list[str]] = {}
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and value is not None:
            strings = _literal_strings(value, bound)
            if strings:
                bound[target.id] = strings
    return bound


def _compare_hits(node: ast.Compare, bound: dict[str, list[str]]) -> list[str]:
    sides = [node.left, *node.comparators]
    hits: list[str] = []
    for i, op in enumerate(node.ops):
        if not isinstance(op, _OPS):
            continue
        left, right = sides[i], sides[i + 1]
        for frame_side, other in ((left, right), (right, left)):
            if _is_frame_function(frame_side):
                hits += _literal_strings(other, bound)
    return hits


def _threads_with_hits(node: ast.Call, bound: dict[str, list[str]]) -> list[str]:
    if _receiver(node.func) != "threads_with":
        return []
    funcs = [*node.args[1:2], *(k.value for k in node.keywords if k.arg == "funcs")]
    return [s for arg in funcs for s in _literal_strings(arg, bound)]


def frame_name_literals(source: str) -> list[tuple[int, str]]:
    """(line, name) for every string literal compared with a frame's function name in `source`."""
    tree = ast.parse(source)
    bound = _module_literals(tree)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            found += [(node.lineno, s) for s in _compare_hits(node, bound)]
        elif isinstance(node, ast.Call):
            found += [(node.lineno, s) for s in _threads_with_hits(node, bound)]
    return found


def _outside_signatures() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if SIGNATURES not in p.parents)


def test_no_module_outside_signatures_compares_a_frame_name() -> None:
    bad = [
        f"{path.relative_to(ROOT)}:{line}: {name!r}"
        for path in _outside_signatures()
        for line, name in frame_name_literals(path.read_text())
    ]
    assert not bad, "frame names belong in analysis/signatures/ (a named constant):\n" + "\n".join(
        bad
    )


def _constant_value(module: str, name: str) -> object:
    return getattr(importlib.import_module(module), name)


def _as_literal(value: object) -> ast.expr | None:
    """A str, or a tuple or frozenset of str, as the literal that would have been written in its place."""
    if type(value) is str:  # not a str enum (Block)
        return ast.Constant(value)
    if isinstance(value, tuple) and value and all(type(v) is str for v in value):
        return ast.parse(repr(value), mode="eval").body
    if isinstance(value, frozenset) and value and all(type(v) is str for v in value):
        return ast.parse(f"frozenset({sorted(value)!r})", mode="eval").body
    return None


def inline_signature_constants(source: str) -> str:
    """The named transformation: every constant imported from the signatures package written back
    as its value (`PULL_RAW_REQS` -> `'_pull_raw_reqs'`, `frames.WAKE_UP` -> `'wake_up'`), as the
    module read before its frame names moved into the package."""
    tree = ast.parse(source)
    names: dict[str, tuple[str, str]] = {}
    modules: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(SIGNATURES_MODULE):
            for alias in node.names:
                value = _constant_value(node.module or "", alias.name)
                if isinstance(value, ModuleType):
                    modules[alias.asname or alias.name] = value.__name__
                else:
                    names[alias.asname or alias.name] = (node.module or "", alias.name)

    class Inline(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.expr:
            if node.id in names and isinstance(node.ctx, ast.Load):
                return _as_literal(_constant_value(*names[node.id])) or node
            return node

        def visit_Attribute(self, node: ast.Attribute) -> ast.expr:
            if isinstance(node.value, ast.Name) and node.value.id in modules:
                literal = _as_literal(_constant_value(modules[node.value.id], node.attr))
                if literal is not None:
                    return literal
            return self.generic_visit(node)

    return ast.unparse(Inline().visit(tree))


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        ("analysis/readers/pyspy.py", {"_pull_raw_reqs", "_start_loop", "run_forever", "_bootstrap"}),
        ("analysis/readers/sglang_http.py", {"event_loop", "sock_recv"}),
        (
            # the known cases' frames are table entries (FramesNeed); the Lock rule still compares
            "analysis/parts/known_bugs.py",
            {"_update_bucket_weights_from_distributed", "update_weights_from_distributed"},
        ),
    ],
)
def test_the_check_fails_on_a_module_with_its_frame_names_written_in(
    module: str, expected: set[str]
) -> None:
    """The same module with the package's constants written back as values fails the check: the
    check reads what the code compares, not what it imports."""
    source = (PACKAGE / module).read_text()
    assert not frame_name_literals(source)
    found = {name for _, name in frame_name_literals(inline_signature_constants(source))}
    assert expected <= found, found
