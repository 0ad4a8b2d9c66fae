"""The JSON report: `Verdict.to_json()` unchanged, plus the process table, the stack excerpt and
the waits.

The top-level keys of `slime-hangdoctor.verdict/1` keep their names and values; this module only
adds `processes` (one object per `RoleRow`), `stack_excerpt` (null when there is none) and `waits`
(one object per `Wait`: the wait-for graph's edges).
"""

from __future__ import annotations

import json
from typing import Any

from slime_hangdoctor.verdict import Diagnosis, RoleRow, StackExcerpt, Wait, WaitParty

__all__ = ["render_json", "report_json"]


def report_json(diagnosis: Diagnosis) -> dict[str, Any]:
    """The JSON-ready report: the verdict contract plus `processes` and `stack_excerpt`."""
    report = diagnosis.verdict.to_json()
    report["processes"] = [_process(row) for row in diagnosis.rows]
    report["stack_excerpt"] = None if diagnosis.excerpt is None else _excerpt(diagnosis.excerpt)
    report["waits"] = [_wait(w) for w in diagnosis.waits]
    return report


def render_json(diagnosis: Diagnosis) -> str:
    """`report_json` as indented JSON text (no trailing newline)."""
    return json.dumps(report_json(diagnosis), indent=2)


def _process(row: RoleRow) -> dict[str, Any]:
    return {
        "role": row.role.value,
        "label": row.label,
        "node_ip": row.node_ip,
        "pid": row.pid,
        "stage": row.stage.value,
        "state": row.state,
        "culprit": row.culprit,
    }


def _excerpt(excerpt: StackExcerpt) -> dict[str, Any]:
    return {
        "title": excerpt.title,
        "frames": list(excerpt.frames),
        "highlight": list(excerpt.highlight),
    }


def _party(p: WaitParty) -> dict[str, Any]:
    return {
        "label": p.label,
        "role": None if p.role is None else p.role.value,
        "node_ip": p.node_ip,
        "pid": p.pid,
        "url": p.url,
        "actor_id": p.actor_id,
    }


def _wait(w: Wait) -> dict[str, Any]:
    return {
        "waiter": _party(w.waiter),
        "waited_for": _party(w.waited_for),
        "kind": w.kind.value,
        "evidence": list(w.evidence),
    }
