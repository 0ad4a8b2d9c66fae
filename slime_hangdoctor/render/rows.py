"""The process table as a report for a person shows it (text and markdown).

A job of a node or two: every process, a row each, as the verdict lists them. A large job (more
than GROUP_OVER rows: 64 nodes hold some 1,300 slime processes) reads as a few lines, not a
thousand: processes of one role in the same stage and state, MIN_ALIKE or more of them, are one
row that counts them and their nodes (`511 × train rank`, `64 nodes`), at the place of the first;
a culprit is always a row of its own, as is every process in a state of its own (the odd ones out
are what the on-call looks for). At most ROW_LIMIT rows are shown, the culprits' always; the rest
are counted. The JSON and HTML reports list every process (`Diagnosis.rows`)."""

from __future__ import annotations

from dataclasses import dataclass

from slime_hangdoctor.render.labels import role_label
from slime_hangdoctor.verdict import RoleRow

__all__ = [
    "GROUP_OVER",
    "MIN_ALIKE",
    "ROW_LIMIT",
    "ShownRow",
    "ShownTable",
    "group_label",
    "group_node",
    "shown_rows",
    "table_note",
]

GROUP_OVER = 40  # a table of more rows groups alike processes
MIN_ALIKE = 3  # processes in one role, stage and state grouped from this many
ROW_LIMIT = 40  # rows a report shows at most (culprits always); the rest are counted


@dataclass(frozen=True)
class ShownRow:
    """One row shown: a process, or (`count` > 1) a group of alike processes; `row` is the
    process's own row, or the group's first member's (its role, stage and state are the group's)."""

    row: RoleRow
    count: int = 1
    nodes: int = 1  # the nodes the group's processes are on


@dataclass(frozen=True)
class ShownTable:
    rows: tuple[ShownRow, ...]
    total: int  # the processes of the verdict's table
    grouped: bool  # alike processes are grouped
    left_out: int = 0  # processes of the rows not shown (past ROW_LIMIT)


def _alike(row: RoleRow) -> tuple[object, ...]:
    return (row.role, row.stage, row.state)


def shown_rows(rows: tuple[RoleRow, ...]) -> ShownTable:
    """The rows a report shows of the verdict's process table, in its order."""
    if len(rows) <= GROUP_OVER:
        return ShownTable(tuple(ShownRow(r) for r in rows), len(rows), grouped=False)
    members: dict[tuple[object, ...], list[RoleRow]] = {}
    for row in rows:
        if not row.culprit:
            members.setdefault(_alike(row), []).append(row)
    shown: list[ShownRow] = []
    placed: set[tuple[object, ...]] = set()
    for row in rows:
        group = members.get(_alike(row), [])
        if row.culprit or len(group) < MIN_ALIKE:
            shown.append(ShownRow(row))
        elif _alike(row) not in placed:
            placed.add(_alike(row))
            shown.append(ShownRow(row, len(group), len({m.node_ip for m in group})))
    kept = _within_limit(shown)
    left_out = sum(s.count for s in shown) - sum(s.count for s in kept)
    return ShownTable(tuple(kept), len(rows), grouped=True, left_out=left_out)


def _within_limit(shown: list[ShownRow]) -> list[ShownRow]:
    """At most ROW_LIMIT rows, in order: every culprit's, then the others from the top."""
    if len(shown) <= ROW_LIMIT:
        return shown
    room = ROW_LIMIT - sum(1 for s in shown if s.row.culprit)
    kept: list[ShownRow] = []
    for s in shown:
        if s.row.culprit or room > 0:
            room -= 0 if s.row.culprit else 1
            kept.append(s)
    return kept


def group_label(item: ShownRow) -> str:
    """A row's process: its own label, or the group's count and role (`511 × train rank`)."""
    return item.row.label if item.count == 1 else f"{item.count} × {role_label(item.row.role)}"


def group_node(item: ShownRow) -> str:
    """A row's node: its IP (the group's, on one node), or how many nodes (`64 nodes`)."""
    if item.count > 1 and item.nodes > 1:
        return f"{item.nodes} nodes"
    return item.row.node_ip or "-"


def table_note(shown: ShownTable) -> str:
    """What a grouped table leaves out, for its title."""
    note = f"{shown.total} processes, alike ones grouped"
    if shown.left_out:
        note += f"; {shown.left_out} more not shown"
    return f"{note}: the JSON and HTML reports list each"
