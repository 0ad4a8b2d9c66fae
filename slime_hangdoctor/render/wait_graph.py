"""The wait-for graph of a diagnosis as a person can read it: its nodes (slime's processes, grouped
by node and by engine or role) and its edges (`Diagnosis.waits`), cut to what explains the hang.

The rules (docs/reports.md, "The wait-for graph"):
- drawn: the connected component of the waits that reach a culprit (its processes, the waits
  between them, either direction); where no wait reaches a culprit (or none is named), the
  culprits and every process that waits or is waited for. Processes of other components are
  left out and counted (the waits' table and the process table keep them);
- processes that wait for nothing and that nothing waits for are folded into one "N idle" node per
  group (node IP and engine or role), in the groups that the drawn processes are in (a lone one is
  drawn as itself, marked idle); the rest are counted as left out. Where nothing is drawn (no wait, no culprit),
  every group is folded;
- a cycle (a strongly connected set of processes: each waits, through the others, for itself) is
  marked: its waits are `GraphEdge.cycle`, one `Cycle` per set.

Laying it out (dot, with its limits) is render/graph_dot.py."""

from __future__ import annotations

import dataclasses
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from slime_hangdoctor.verdict import Diagnosis, Role, RoleRow, Wait, WaitKind, WaitParty

__all__ = [
    "KIND_WORDS",
    "Cycle",
    "Graph",
    "GraphEdge",
    "GraphNode",
    "build_graph",
    "fold_alike",
    "whole_graph",
]

KIND_WORDS: dict[WaitKind, str] = {
    WaitKind.RAY_CALL: "Ray call",
    WaitKind.QUEUE: "queued behind",
    WaitKind.HTTP_REQUEST: "HTTP request held",
    WaitKind.COLLECTIVE: "collective",
    WaitKind.CHILD: "child joined",
}
_ROLE_GROUPS: dict[Role, str] = {
    Role.DRIVER: "driver",
    Role.ROLLOUT_MANAGER: "RolloutManager",
    Role.ROUTER: "router",
    Role.SGLANG_ENGINE: "engines",
    Role.TRAIN_RANK: "train ranks",
}


@dataclass(frozen=True)
class GraphNode:
    id: str  # "n3" ("i3" for an idle fold): also its id in the SVG
    label: str
    detail: str  # pid and state, one line; an idle fold: the labels it stands for
    node_ip: str | None
    group: str  # "engine http://...", "train ranks", ...
    culprit: bool
    folded: tuple[str, ...] = ()  # an idle node: the labels of the processes it stands for


@dataclass(frozen=True)
class GraphEdge:
    source: str  # node ids
    target: str
    wait: Wait
    number: int  # the wait's place in Diagnosis.waits, from 1 (the waits' table's #)
    cycle: int | None = None  # the cycle it is part of: an index of Graph.cycles
    alike: int = 1  # the waits it stands for (fold_alike: this one and those of alike processes)


@dataclass(frozen=True)
class Cycle:
    nodes: tuple[str, ...]  # the node ids of the set, in graph order
    numbers: tuple[int, ...]  # the waits between them (GraphEdge.number)


@dataclass(frozen=True)
class Graph:
    nodes: tuple[GraphNode, ...]
    edges: tuple[GraphEdge, ...]
    cycles: tuple[Cycle, ...] = ()
    left_out_processes: int = 0  # not drawn: no wait links them to a culprit
    left_out_waits: int = 0
    alike_folded: int = 0  # processes drawn folded with alike ones (fold_alike)


def _key(node_ip: str | None, pid: int | None, other: str) -> tuple[str, ...]:
    return ("pid", node_ip or "", str(pid)) if pid is not None else ("other", other)


def _group(role: Role | None, engine_url: str | None) -> str:
    if engine_url is not None and role is Role.SGLANG_ENGINE:
        return f"engine {engine_url}"
    return _ROLE_GROUPS.get(role, "other") if role is not None else "outside the job"


def _is_culprit(p: WaitParty, diagnosis: Diagnosis) -> bool:
    for c in diagnosis.verdict.culprits:
        if c.pid is not None and c.pid == p.pid and (c.node_ip in (None, p.node_ip)):
            return True
        if p.pid is None and c.engine_url is not None and c.engine_url == p.url:
            return True
    return False


def whole_graph(diagnosis: Diagnosis) -> tuple[list[GraphNode], list[GraphEdge]]:
    """Every process row, and every party of a wait that no row is, with every wait."""
    nodes: dict[tuple[str, ...], GraphNode] = {}

    def add(key: tuple[str, ...], make: GraphNode) -> str:
        if key not in nodes:
            nodes[key] = make
        return nodes[key].id

    for row in diagnosis.rows:
        add(_key(row.node_ip, row.pid, row.label), _row_node(f"n{len(nodes)}", row))
    edges: list[GraphEdge] = []
    for number, w in enumerate(diagnosis.waits, 1):
        ends = []
        for p in (w.waiter, w.waited_for):
            key = _key(p.node_ip, p.pid, p.url or p.label)
            ends.append(add(key, _party_node(f"n{len(nodes)}", p, diagnosis)))
        edges.append(GraphEdge(ends[0], ends[1], w, number))
    return list(nodes.values()), edges


def build_graph(diagnosis: Diagnosis) -> Graph:
    """The graph as drawn: the culprit's component, idle processes folded, cycles marked."""
    nodes, edges = whole_graph(diagnosis)
    linked = {e.source for e in edges} | {e.target for e in edges}
    drawn = _component([n.id for n in nodes if n.culprit], edges)
    if not any(e.source in drawn for e in edges):  # no wait reaches a culprit: draw every wait
        drawn |= linked
    groups = {(n.node_ip, n.group) for n in nodes if n.id in drawn}
    idle: dict[tuple[str | None, str], list[GraphNode]] = defaultdict(list)
    for n in nodes:
        if (
            n.id not in drawn
            and n.id not in linked
            and (not groups or (n.node_ip, n.group) in groups)
        ):
            idle[(n.node_ip, n.group)].append(n)
    kept: list[GraphNode] = []
    for n in nodes:
        members = idle.get((n.node_ip, n.group), [])
        if n.id in drawn:
            kept.append(n)
        elif members and members[0] is n:
            kept.append(_fold(f"i{n.id[1:]}", members) if len(members) > 1 else _alone(n))
    shown = [e for e in edges if e.source in drawn]
    cycles, marked = _marked(kept, shown)
    folded = sum(len(n.folded) for n in kept)
    return Graph(
        tuple(kept),
        marked,
        cycles,
        left_out_processes=len(nodes) - len(drawn) - folded,
        left_out_waits=len(edges) - len(shown),
    )


def _marked(
    nodes: list[GraphNode], edges: list[GraphEdge]
) -> tuple[tuple[Cycle, ...], tuple[GraphEdge, ...]]:
    """The cycles among `nodes`, and `edges` with those inside a cycle marked."""
    cycles = _cycles([n.id for n in nodes], edges)
    in_cycle = {node: c for c, cycle in enumerate(cycles) for node in cycle.nodes}
    marked = tuple(
        dataclasses.replace(e, cycle=in_cycle[e.source])
        if e.source in in_cycle and in_cycle[e.source] == in_cycle.get(e.target)
        else dataclasses.replace(e, cycle=None)
        for e in edges
    )
    return cycles, marked


_URL = re.compile(r"\b[a-z]+://\S+")
_NUMBER = re.compile(r"\d+")


def _shape(n: GraphNode) -> tuple[str, str, bool, bool]:
    """What alike processes share: the label and group without addresses and numbers (train rank
    #, scheduler, engine), and being an idle fold. A culprit is alike to none: its own id."""
    if n.culprit:
        return n.id, "", True, False
    label = _NUMBER.sub("#", _URL.sub("", n.label)).strip()
    group = _NUMBER.sub("#", _URL.sub("", n.group)).strip()
    return label, group, False, bool(n.folded)


def fold_alike(graph: Graph) -> Graph:
    """A large graph with alike processes drawn as one node: processes of the same shape (label
    and group without addresses and numbers, culprit or not) that wait, and are waited for, in the
    same ways by processes alike in turn (the coarsest such partition, refined until stable) are
    one node "LABEL and N-1 alike"; their waits one edge per kind and end, counting them."""
    classes = _alike_classes(graph)
    members: dict[int, list[GraphNode]] = defaultdict(list)
    for n in graph.nodes:
        members[classes[n.id]].append(n)
    ids = {}
    nodes = []
    for group in members.values():
        node = group[0] if len(group) == 1 else _alike_node(group)
        nodes.append(node)
        ids.update({m.id: node.id for m in group})
    edges: dict[tuple[str, str, WaitKind], GraphEdge] = {}
    for e in graph.edges:
        key = (ids[e.source], ids[e.target], e.wait.kind)
        seen = edges.get(key)
        edges[key] = (
            dataclasses.replace(e, source=key[0], target=key[1])
            if seen is None
            else dataclasses.replace(seen, alike=seen.alike + e.alike)
        )
    cycles, marked = _marked(nodes, list(edges.values()))
    return dataclasses.replace(
        graph,
        nodes=tuple(nodes),
        edges=marked,
        cycles=cycles,
        alike_folded=sum(len(g) for g in members.values() if len(g) > 1),
    )


def _alike_classes(graph: Graph) -> dict[str, int]:
    shapes: dict[object, int] = {}
    classes = {n.id: shapes.setdefault(_shape(n), len(shapes)) for n in graph.nodes}
    while True:
        out: dict[str, set[tuple[WaitKind, int]]] = defaultdict(set)
        into: dict[str, set[tuple[WaitKind, int]]] = defaultdict(set)
        for e in graph.edges:
            out[e.source].add((e.wait.kind, classes[e.target]))
            into[e.target].add((e.wait.kind, classes[e.source]))
        keys: dict[object, int] = {}
        refined = {
            n: keys.setdefault((c, frozenset(out[n]), frozenset(into[n])), len(keys))
            for n, c in classes.items()
        }
        if len(keys) == len(set(classes.values())):
            return refined
        classes = refined


def _alike_node(group: list[GraphNode]) -> GraphNode:
    first = group[0]
    hosts = {m.node_ip for m in group}
    groups = {m.group for m in group}
    idle = tuple(label for m in group for label in m.folded)
    return GraphNode(
        f"a{first.id}",
        f"{len(idle)} idle" if first.folded else f"{first.label} and {len(group) - 1} alike",
        first.detail,
        first.node_ip if len(hosts) == 1 else f"{first.node_ip} and {len(hosts) - 1} more nodes",
        first.group if len(groups) == 1 else f"{first.group} and {len(groups) - 1} more",
        first.culprit,
        idle,
    )


def _component(seeds: Iterable[str], edges: list[GraphEdge]) -> set[str]:
    """The node ids that the waits link to `seeds`, whichever way a wait points."""
    near: dict[str, list[str]] = defaultdict(list)
    for e in edges:
        near[e.source].append(e.target)
        near[e.target].append(e.source)
    seen = set(seeds)
    todo = list(seen)
    while todo:
        for other in near[todo.pop()]:
            if other not in seen:
                seen.add(other)
                todo.append(other)
    return seen


def _fold(node_id: str, members: list[GraphNode]) -> GraphNode:
    first = members[0]
    labels = tuple(m.label for m in members)
    return GraphNode(
        node_id,
        f"{len(members)} idle",
        "wait for nothing, nothing waits for them: " + ", ".join(labels),
        first.node_ip,
        first.group,
        culprit=False,
        folded=labels,
    )


def _alone(n: GraphNode) -> GraphNode:
    """An idle process alone in its group: drawn as itself, marked idle."""
    return dataclasses.replace(n, folded=(n.label,))


def _cycles(order: list[str], edges: list[GraphEdge]) -> tuple[Cycle, ...]:
    """The strongly connected sets of two or more nodes (or one that waits for itself), each with
    the waits inside it: Tarjan's algorithm, iterative (a job's graph may be deep)."""
    out: dict[str, list[str]] = defaultdict(list)
    for e in edges:
        out[e.source].append(e.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    sets: list[set[str]] = []
    for root in order:
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(out[root]))]
        while work:
            v, todo = work[-1]
            w = next(todo, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(out[w])))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                cut = stack.index(v)
                sets.append(set(stack[cut:]))
                on_stack.difference_update(stack[cut:])
                del stack[cut:]
    where = {n: k for k, members in enumerate(sets) for n in members}
    inner: dict[int, list[int]] = defaultdict(list)
    for e in edges:
        if where[e.source] == where[e.target]:
            inner[where[e.source]].append(e.number)
    cycles = [
        Cycle(tuple(n for n in order if where[n] == k), tuple(numbers))
        for k, numbers in inner.items()
    ]  # a set of one is a cycle only where it waits for itself: then it has an inner wait
    return tuple(sorted(cycles, key=lambda c: min(c.numbers)))


def _row_node(node_id: str, row: RoleRow) -> GraphNode:
    pid = f"pid {row.pid}" if row.pid is not None else "no pid"
    return GraphNode(
        node_id,
        row.label,
        f"{pid}: {row.state}",
        row.node_ip,
        _group(row.role, row.engine_url),
        row.culprit,
    )


def _party_node(node_id: str, p: WaitParty, diagnosis: Diagnosis) -> GraphNode:
    pid = f"pid {p.pid}" if p.pid is not None else (p.url or "")
    return GraphNode(
        node_id, p.label, pid, p.node_ip, _group(p.role, p.url), _is_culprit(p, diagnosis)
    )
