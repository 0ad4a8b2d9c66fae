"""A math answer grader in the shape of slime's math_utils (verl-style): normalise, compare the
strings, and fall back to sympy for expressions. The sympy step has no timeout."""

from __future__ import annotations

import re
from typing import Any

_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
_BAD_SUBSTRINGS = ("^{", "^(")


def extract_boxed_answer(text: str) -> str | None:
    m = _BOXED.search(text)
    return m.group(1) if m else None


def _normalize(expr: str | None) -> str | None:
    if expr is None:
        return None
    expr = expr.strip().replace(" ", "").replace("\\!", "").rstrip(".")
    expr = expr.replace("\\left", "").replace("\\right", "").replace("$", "")
    return expr.lower()


def _is_float(num: str) -> bool:
    try:
        float(num)
    except ValueError:
        return False
    return True


def should_allow_eval(expr: str) -> bool:
    """Only expressions with at most two unknown letters are worth handing to sympy."""
    letters = set(re.findall(r"[a-z]", expr.replace("sqrt", "")))
    if len(letters) > 2:
        return False
    return not any(bad in expr for bad in _BAD_SUBSTRINGS)


def _sympy_parse(expr: str) -> Any:
    import sympy  # type: ignore[import-untyped]
    from sympy.parsing.sympy_parser import (  # type: ignore[import-untyped]
        parse_expr,
        standard_transformations,
    )

    py_expr = expr.replace("^", "**").replace("\\sqrt", "sqrt").replace("{", "(").replace("}", ")")
    return parse_expr(
        py_expr, transformations=standard_transformations, local_dict={"sqrt": sympy.sqrt}
    )


def are_equal_under_sympy(ground_truth_normalized: str, given_normalized: str) -> bool:
    """sympy.simplify the difference; denest and re-simplify until it settles (it may not)."""
    import sympy

    expr = f"({ground_truth_normalized})-({given_normalized})"
    if not should_allow_eval(expr):
        return False
    try:
        diff = _sympy_parse(expr)
    except Exception:
        return False
    simplified = sympy.simplify(diff)
    seen = 0
    while simplified != 0 and simplified.has(sympy.Pow):
        # Keep expanding nested radicals: a pathological answer never settles.
        seen += 1
        simplified = sympy.simplify(sympy.expand(simplified + seen) - seen)
    return bool(simplified == 0)


def grade_answer_verl(solution_str: str, ground_truth: str) -> bool:
    if not ground_truth:
        return False
    given = _normalize(extract_boxed_answer(solution_str) or solution_str)
    gt = _normalize(ground_truth)
    if given is None or gt is None or not given:
        return False
    if given == gt:
        return True
    if _is_float(given) and _is_float(gt):
        return abs(float(given) - float(gt)) < 1e-6
    if not re.fullmatch(r"[0-9a-z+\-*/^().\\{}]+", given.replace("sqrt", "")):
        return False
    return are_equal_under_sympy(gt, given)
