"""The wait-for graph (render/wait_graph.py) laid out by Graphviz `dot` into SVG, then rebuilt from
an allow-list (no script, no link, no style, no reference outside the page).

`dot` is an optional dependency (Debian `graphviz`), and it runs bounded: only on a graph of at
most MAX_DOT_NODES nodes and MAX_DOT_EDGES edges (`too_big`), within `dot_seconds` (what is left
of the run's deadline, at least MIN_DOT_S, at most DOT_TIMEOUT_S; killed past it) and under an
address-space limit (RLIMIT_AS, DOT_MEMORY_BYTES, set on the child with prlimit before it is
handed the graph). Where it is missing, fails, is too slow or the graph too big, `layout_svg`
returns None and the report shows the graph as a nested list.

Every text that reaches `dot` comes from the job: it is made one printable line
(render/printable.py) and quoted for dot's language, so no label can close its string, start an
HTML-like label or use dot's escapes (`\\N`, `\\G`, ...). Sizes are in points (an SVG unit at
dot's natural size is 4/3 of a CSS pixel): the smallest, an edge's label, is 10 pt = 13.3 px."""

from __future__ import annotations

import html
import resource
import shutil
import subprocess
import textwrap
import xml.etree.ElementTree as ET

from slime_hangdoctor.render.printable import one_line
from slime_hangdoctor.render.wait_graph import KIND_WORDS, Graph, GraphNode
from slime_hangdoctor.verdict import WaitKind

__all__ = [
    "DOT_MEMORY_BYTES",
    "DOT_TIMEOUT_S",
    "MAX_DOT_EDGES",
    "MAX_DOT_NODES",
    "MIN_DOT_S",
    "dot_seconds",
    "dot_source",
    "layout_svg",
    "sanitise_svg",
    "too_big",
]

DOT_TIMEOUT_S = 10.0  # the most dot is given, whatever is left of the run
MIN_DOT_S = 1.0  # the least: a run past its deadline still gets a small graph drawn
DOT_MEMORY_BYTES = 512 * 2**20  # dot's address space (a 150-node graph needs under 64 MiB)
MAX_DOT_NODES = 150
MAX_DOT_EDGES = 300
MAX_DOT_BYTES = 2**20  # an SVG larger than this is not put in a page
CYCLE_COLOUR = "#c00000"

_KIND_COLOURS: dict[WaitKind, str] = {
    WaitKind.RAY_CALL: "#1f5fa8",
    WaitKind.QUEUE: "#7a4fa0",
    WaitKind.HTTP_REQUEST: "#b8620b",
    WaitKind.COLLECTIVE: "#a01c1c",
    WaitKind.CHILD: "#2f7d32",
}


def dot_seconds(time_left_s: float | None) -> float:
    """How long dot may run: what is left of the run's deadline (None: no deadline, as `analyse`),
    at least MIN_DOT_S, at most DOT_TIMEOUT_S."""
    if time_left_s is None:
        return DOT_TIMEOUT_S
    return max(MIN_DOT_S, min(DOT_TIMEOUT_S, time_left_s))


def too_big(graph: Graph) -> str:
    """Why `graph` is not given to dot (over its caps), or ""."""
    if len(graph.nodes) <= MAX_DOT_NODES and len(graph.edges) <= MAX_DOT_EDGES:
        return ""
    return (
        f"the graph has {len(graph.nodes)} nodes and {len(graph.edges)} waits, more than "
        f"{MAX_DOT_NODES} nodes or {MAX_DOT_EDGES} waits are laid out"
    )


# --------------------------------------------------------------------------- dot's language


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
        '  graph [rankdir=TB, fontname="Helvetica", fontsize=12, nodesep=0.3, ranksep=0.75];',
        '  node [shape=box, style="rounded,filled", fillcolor="#f4f6f8", color="#5b6770", '
        'fontname="Helvetica", fontsize=11];',
        '  edge [fontname="Helvetica", fontsize=10];',
    ]
    hosts: dict[str, dict[str, list[GraphNode]]] = {}
    for n in sorted(graph.nodes, key=lambda n: not n.culprit):  # the culprit's box first (left)
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
            out += [f"      {_dot_node(n)}" for n in members]
            out.append("    }")
        out.append("  }")
    out += [f"  {line}" for line in _dot_edges(graph)]
    out.append("}")
    return "\n".join(out) + "\n"


def _dot_node(n: GraphNode) -> str:
    label = f"{_dot_text(_in_group(n), 30, 2)}\\n{_dot_text(n.detail, 32, 4)}"
    if n.culprit:
        extra = ', class="proc culprit", fillcolor="#ffd9d9", color="#c00000", penwidth=3'
    elif n.folded:
        extra = ', class="proc idle", style="rounded,dashed,filled", fillcolor="#fbfcfd"'
    else:
        extra = ', class="proc"'
    return f'{n.id} [id="{n.id}", label="{label}"{extra}];'


def _in_group(n: GraphNode) -> str:
    """A node's label inside its group's box: without the engine's URL the box already shows."""
    words = n.group.split()
    if len(words) < 2 or words[0] != "engine":
        return n.label
    return n.label.replace(f" {words[1]}", "")


def _dot_edges(graph: Graph) -> list[str]:
    out = []
    for e in graph.edges:
        w = e.wait
        first = w.evidence[0] if w.evidence else ""
        head = f"{e.number}. {KIND_WORDS[w.kind]}" + (f" ×{e.alike}" if e.alike > 1 else "")
        colour = _KIND_COLOURS[w.kind]
        style = f'class="wait {w.kind.value}", color="{colour}"'
        if e.cycle is not None:
            head += f" · cycle {e.cycle + 1}"
            style = (
                f'class="wait {w.kind.value} cycle", color="{CYCLE_COLOUR}", penwidth=2.5, '
                'style="bold"'
            )
        label = f"{head}\\n{_dot_text(first, 28, 2)}"
        out.append(
            f'{e.source} -> {e.target} [id="w{e.number}", {style}, label="{label}", '
            f'fontcolor="{colour}"];'
        )
    return out


# --------------------------------------------------------------------------- running dot


def layout_svg(
    source: str, timeout_s: float = DOT_TIMEOUT_S, memory_bytes: int = DOT_MEMORY_BYTES
) -> tuple[str | None, str]:
    """(SVG, "") laid out by Graphviz's `dot` and sanitised; (None, why) where it could not be:
    dot missing, failing, out of `memory_bytes` of address space, or still running after
    `timeout_s` (then killed)."""
    dot = shutil.which("dot")
    if dot is None:
        return None, "Graphviz's dot is not installed (Debian: apt-get install graphviz)"
    try:
        proc = subprocess.Popen(
            [dot, "-Tsvg"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
    except OSError as exc:
        return None, f"Graphviz's dot could not run: {exc.strerror or exc}"
    try:
        # before it reads the graph: prlimit on the child, not a preexec_fn (unsafe with threads)
        resource.prlimit(proc.pid, resource.RLIMIT_AS, (memory_bytes, memory_bytes))
        out, err = proc.communicate(source.encode("utf-8"), timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _stop(proc)
        return None, f"Graphviz's dot did not finish within {timeout_s:.1f} s and was stopped"
    except (OSError, AttributeError) as exc:  # AttributeError: no prlimit (not Linux)
        _stop(proc)
        return None, f"Graphviz's dot could not be limited: {exc}"
    if proc.returncode != 0:
        why = one_line(err.decode("utf-8", "replace").strip()[:200])
        return None, f"Graphviz's dot failed (exit {proc.returncode}): {why}"
    if len(out) > MAX_DOT_BYTES:
        return (
            None,
            f"Graphviz's dot wrote {len(out) / 2**20:.1f} MiB of SVG, more than a page takes",
        )
    svg = sanitise_svg(out)
    if svg is None:
        return None, "Graphviz's dot wrote SVG that did not parse"
    return svg, ""


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Kill dot and reap it (a killed process ends at once; its pipes are drained meanwhile)."""
    proc.kill()
    proc.communicate()


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
