"""The wait-for graph of a diagnosis: its nodes (slime's processes, grouped by node and by engine or
role) and edges (`Diagnosis.waits`), as Graphviz `dot` source, laid out by `dot` into SVG that is
then rebuilt from an allow-list (no script, no link, no style, no reference outside the page).

`dot` is an optional dependency (Debian `graphviz`): where it is missing, fails or takes longer
than `DOT_TIMEOUT_S`, `layout_svg` returns None and the report shows the graph as a nested list.
Every text that reaches `dot` comes from the job: it is made one printable line
(render/printable.py) and quoted for dot's language, so no label can close its string, start an
HTML-like label or use dot's escapes (`\\N`, `\\G`, ...)."""

from __future__ import annotations

import html
import shutil
import subprocess
import textwrap
import xml.etree.ElementTree as ET
from dataclasses import dataclass

from slime_hangdoctor.render.printable import one_line
from slime_hangdoctor.verdict import Diagnosis, Role, RoleRow, Wait, WaitKind, WaitParty

__all__ = [
    "DOT_TIMEOUT_S",
    "KIND_WORDS",
    "Graph",
    "GraphNode",
    "build_graph",
    "dot_source",
    "layout_svg",
    "sanitise_svg",
]

DOT_TIMEOUT_S = 10.0
MAX_DOT_BYTES = 4 * 2**20  # an SVG larger than this is not put in a page

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
_KIND_COLOURS: dict[WaitKind, str] = {
    WaitKind.RAY_CALL: "#1f5fa8",
    WaitKind.QUEUE: "#7a4fa0",
    WaitKind.HTTP_REQUEST: "#b8620b",
    WaitKind.COLLECTIVE: "#a01c1c",
    WaitKind.CHILD: "#2f7d32",
}


@dataclass(frozen=True)
class GraphNode:
    id: str  # "n3": also its id in the SVG
    label: str
    detail: str  # pid and state, one line
    node_ip: str | None
    group: str  # "engine http://...", "train ranks", ...
    culprit: bool


@dataclass(frozen=True)
class Graph:
    nodes: tuple[GraphNode, ...]
    edges: tuple[tuple[str, str, Wait], ...]  # (from node id, to node id, the wait)


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


def build_graph(diagnosis: Diagnosis) -> Graph:
    """Every process row, and every party of a wait that no row is, with the waits between them."""
    nodes: dict[tuple[str, ...], GraphNode] = {}

    def add(key: tuple[str, ...], make: GraphNode) -> str:
        if key not in nodes:
            nodes[key] = make
        return nodes[key].id

    for row in diagnosis.rows:
        add(_key(row.node_ip, row.pid, row.label), _row_node(f"n{len(nodes)}", row))
    edges: list[tuple[str, str, Wait]] = []
    for w in diagnosis.waits:
        ends = []
        for p in (w.waiter, w.waited_for):
            key = _key(p.node_ip, p.pid, p.url or p.label)
            ends.append(add(key, _party_node(f"n{len(nodes)}", p, diagnosis)))
        edges.append((ends[0], ends[1], w))
    return Graph(tuple(nodes.values()), tuple(edges))


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


# --------------------------------------------------------------------------- dot


def _dot_text(text: str, width: int = 0, lines: int = 1) -> str:
    """Job text as the inside of a quoted dot string: one printable line (wrapped into at most
    `lines` lines of `width`), `&` as an entity (dot reads entities in labels), backslash and
    quote escaped (the only escapes dot's parser knows in a quoted string)."""
    flat = one_line(text)
    parts = textwrap.wrap(flat, width, max_lines=lines, placeholder=" …") if width else [flat]
    return "\\n".join(
        p.replace("&", "&amp;").replace("\\", "\\\\").replace('"', '\\"') for p in parts or [""]
    )


def dot_source(graph: Graph) -> str:
    """The graph in dot's language: a cluster per node IP, inside it one per engine or role."""
    out = [
        "digraph waits {",
        '  graph [rankdir=TB, fontname="Helvetica", fontsize=11, nodesep=0.25, ranksep=0.7];',
        '  node [shape=box, style="rounded,filled", fillcolor="#f4f6f8", color="#5b6770", '
        'fontname="Helvetica", fontsize=10];',
        '  edge [fontname="Helvetica", fontsize=9];',
    ]
    hosts: dict[str, dict[str, list[GraphNode]]] = {}
    for n in graph.nodes:
        hosts.setdefault(n.node_ip or "node unknown", {}).setdefault(n.group, []).append(n)
    for h, (host, groups) in enumerate(hosts.items()):
        out.append(f"  subgraph cluster_h{h} {{")
        out.append(f'    id="host{h}"; class="host"; label="{_dot_text(host)}"; color="#9aa5ad";')
        for g, (group, members) in enumerate(groups.items()):
            out.append(f"    subgraph cluster_h{h}g{g} {{")
            out.append(
                f'      id="group{h}-{g}"; class="group"; label="{_dot_text(group, 40, 2)}"; '
                'style="dashed"; color="#c2c9ce";'
            )
            for n in members:
                label = f"{_dot_text(n.label, 40, 2)}\\n{_dot_text(n.detail, 40, 4)}"
                extra = (
                    ', class="proc culprit", fillcolor="#ffd9d9", color="#c00000", penwidth=3'
                    if n.culprit
                    else ', class="proc"'
                )
                out.append(f'      {n.id} [id="{n.id}", label="{label}"{extra}];')
            out.append("    }")
        out.append("  }")
    for i, (a, b, w) in enumerate(graph.edges, 1):
        first = w.evidence[0] if w.evidence else ""
        label = f"{i}. {KIND_WORDS[w.kind]}\\n{_dot_text(first, 34, 2)}"
        colour = _KIND_COLOURS[w.kind]
        out.append(
            f'  {a} -> {b} [id="w{i}", class="wait {w.kind.value}", label="{label}", '
            f'color="{colour}", fontcolor="{colour}"];'
        )
    out.append("}")
    return "\n".join(out) + "\n"


def layout_svg(source: str, timeout_s: float = DOT_TIMEOUT_S) -> tuple[str | None, str]:
    """(SVG, "") laid out by Graphviz's `dot` and sanitised; (None, why) where it could not be."""
    dot = shutil.which("dot")
    if dot is None:
        return None, "Graphviz's dot is not installed (Debian: apt-get install graphviz)"
    try:
        done = subprocess.run(
            [dot, "-Tsvg"],
            input=source.encode("utf-8"),
            capture_output=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None, f"Graphviz's dot took longer than {timeout_s:.0f} s"
    except OSError as exc:
        return None, f"Graphviz's dot could not run: {exc.strerror or exc}"
    if done.returncode != 0 or len(done.stdout) > MAX_DOT_BYTES:
        why = one_line(done.stderr.decode("utf-8", "replace").strip()[:200])
        return None, f"Graphviz's dot failed (exit {done.returncode}): {why}"
    svg = sanitise_svg(done.stdout)
    if svg is None:
        return None, "Graphviz's dot wrote SVG that did not parse"
    return svg, ""


# --------------------------------------------------------------------------- SVG allow-list

_SVG_NS = "{http://www.w3.org/2000/svg}"
_ELEMENTS = frozenset(
    {
        "svg",
        "g",
        "title",
        "text",
        "polygon",
        "polyline",
        "path",
        "ellipse",
        "circle",
        "line",
        "rect",
    }
)
_UNWRAP = frozenset({"a"})  # dot wraps tooltips and URLs in <a>: keep what is inside, drop the link
_ATTRIBUTES = frozenset(
    {
        "id", "class", "fill", "stroke", "stroke-width", "stroke-dasharray", "fill-opacity",
        "stroke-opacity", "d", "points", "cx", "cy", "rx", "ry", "r", "x", "y", "x1", "y1",
        "x2", "y2", "width", "height", "viewBox", "transform", "text-anchor", "font-family",
        "font-size", "font-weight", "font-style",
    }
)  # fmt: skip


def sanitise_svg(data: bytes) -> str | None:
    """dot's SVG rebuilt from an allow-list of elements and attributes: no script, style, link,
    foreign object, event handler or reference (href, url(...)) survives; text is escaped anew."""
    try:
        root = ET.fromstring(data)
    except ET.ParseError:
        return None
    if root.tag != f"{_SVG_NS}svg":
        return None
    return "".join(_element(root))


def _element(el: ET.Element) -> list[str]:
    tag = el.tag[len(_SVG_NS) :] if el.tag.startswith(_SVG_NS) else None
    if tag in _UNWRAP:
        return _children(el)
    if tag not in _ELEMENTS:
        return []
    attrs = "".join(
        f' {name}="{html.escape(value, quote=True)}"'
        for name, value in el.attrib.items()
        if name in _ATTRIBUTES and "url(" not in value.lower() and "script" not in value.lower()
    )
    return [f"<{tag}{attrs}>", *_children(el), f"</{tag}>"]


def _children(el: ET.Element) -> list[str]:
    out = [html.escape(el.text or "", quote=False)]
    for child in el:
        out += _element(child)
        out.append(html.escape(child.tail or "", quote=False))
    return out
