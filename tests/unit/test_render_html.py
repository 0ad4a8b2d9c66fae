"""The HTML report (render/html.py, render/wait_graph.py) on recorded demo bundles: the wait-for
graph laid out by Graphviz's dot (installed by apt where the test can, else skipped with the
reason), the nested list without dot, and hostile text (put in the recorded stacks and log bodies
by `transforms.bundle_with_frame_names_suffixed` and `bundle_with_log_lines_suffixed`) shown
literally, never as markup, with secrets blanked. What a browser makes of the page is tests/integration/test_html_report_chromium.py."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from slime_hangdoctor.render.graph_dot import layout_svg
from slime_hangdoctor.render.html import render_html
from slime_hangdoctor.render.wait_graph import KIND_WORDS
from slime_hangdoctor.verdict import Diagnosis
from tests.debian_tools import require_tool
from tests.fixtures.transforms import (
    bundle_with_frame_names_suffixed,
    bundle_with_log_lines_suffixed,
)
from tests.html_dom import Element, inert_problems, parse_dom
from tests.unit.demo_bundles import DEMO, diagnosed, unpacked

# A culprit (engine 2's scheduler never joins the broadcast) and nine waits of three kinds.
BUNDLE = DEMO / "weight_sync_health_check_queued.tar.gz"

# Hostile text appended to every recorded frame name: each piece tries one way out of its place.
SECRET = "SECRETX-htmlbearer-7c1e"
HOSTILE = (
    "</text></svg><script>alert(1)</script>"  # out of an SVG label, into a script
    '"><img src=http://x.invalid/p.png onerror=alert(2)>'  # out of an attribute
    "<<B>dot html</B>>\\N\\G\\L"  # dot's HTML-like labels and escapes
    "&amp;&#x3c;"  # entities: shown as written
    "\u202eevil\u200b\r\n"  # bidi override, zero width, line breaks
    f" Authorization: Bearer {SECRET}"  # a secret in the job's text
)


def _no_dot(_source: str, _seconds: float) -> tuple[str | None, str]:
    return None, "no layout engine in this test"


def _svg(page: str) -> ET.Element:
    start = page.index("<svg")
    end = page.index("</svg>", start) + len("</svg>")
    return ET.fromstring(page[start:end])


def _text(el: ET.Element) -> str:
    return "".join(el.itertext())


def test_every_wait_is_a_labelled_edge_and_the_culprit_node_is_highlighted() -> None:
    require_tool("dot", "graphviz")
    d = diagnosed(BUNDLE)
    assert len(d.waits) >= 5 and len({w.kind for w in d.waits}) >= 3
    page = render_html(d)
    svg = _svg(page)
    edges = {g.get("id"): g for g in svg.iter("g") if "edge" in g.get("class", "").split()}
    assert sorted(edges) == sorted(f"w{i}" for i in range(1, len(d.waits) + 1))
    for i, w in enumerate(d.waits, 1):
        g = edges[f"w{i}"]
        label = " ".join(_text(t) for t in g.iter("text"))
        assert label.startswith(f"{i}. {KIND_WORDS[w.kind]}"), label
        assert len(label) > len(f"{i}. {KIND_WORDS[w.kind]}") + 5, label  # its evidence too
        assert w.kind.value in g.get("class", "")
    culprit = d.verdict.culprits[0]
    marked = [g for g in svg.iter("g") if "culprit" in g.get("class", "").split()]
    assert any(f"pid {culprit.pid}" in _text(g) for g in marked), [_text(g) for g in marked]
    for g in marked:  # highlighted by dot itself, whatever the page's style sheet does
        shape = next(el for el in g.iter() if el.tag in ("polygon", "path"))
        assert (shape.get("stroke"), shape.get("fill")) == ("#c00000", "#ffd9d9")
    rows = {r.pid for r in d.rows if r.culprit}
    assert rows and all(any(f"pid {pid}" in _text(g) for g in marked) for pid in rows)
    assert not inert_problems(parse_dom(page))


def test_without_dot_the_graph_is_a_nested_list_with_every_wait() -> None:
    d = diagnosed(BUNDLE)
    dom = parse_dom(render_html(d, layout=_no_dot))
    listing = dom.by_id("graph-list")
    assert listing is not None and "no layout engine in this test" in dom.text
    culprits = list(listing.find_all("li", "culprit"))
    assert any(f"pid {d.verdict.culprits[0].pid}" in li.text for li in culprits)
    waits = {li.attrs["id"]: li for li in listing.find_all("li", "wait")}
    assert len(waits) == len(d.waits)
    for i, w in enumerate(d.waits, 1):
        li = waits[f"list-w{i}"]  # under its waiter's item
        assert f"({i}. {KIND_WORDS[w.kind]})" in li.text and w.waited_for.label in li.text
    # the waits' table below the graph has each wait's evidence, whatever the layout
    table = list(dom.find_all("tr", "wait"))
    assert [tr.attrs["id"] for tr in table] == [f"wait-{i}" for i in range(1, len(d.waits) + 1)]
    assert all(line in tr.text for tr, w in zip(table, d.waits, strict=True) for line in w.evidence)


def hostile_bundle(tmp_path: Path) -> Path:
    """The recorded bundle with HOSTILE at the end of every frame name (stacks) and of every log
    line (Ray's log API bodies)."""
    src = unpacked(BUNDLE.name.removesuffix(".tar.gz"), tmp_path / "src")
    frames = bundle_with_frame_names_suffixed(src, tmp_path / "frames", HOSTILE)
    return bundle_with_log_lines_suffixed(frames, tmp_path / "hostile", HOSTILE.replace("\n", ""))


def _hostile(tmp_path: Path) -> Diagnosis:
    return diagnosed(hostile_bundle(tmp_path))


def _assert_inert(page: str, dom: Element) -> None:
    assert not inert_problems(dom), inert_problems(dom)
    assert SECRET not in page
    assert "\u202e" not in page and "\u200b" not in page and "\r" not in page
    # shown literally: the reader sees the hostile text as text (escaped where it was not printable)
    shown = dom.text
    assert "</text></svg><script>alert(1)</script>" in shown
    assert '"><img src=http://x.invalid/p.png onerror=alert(2)>' in shown
    assert "&amp;&#x3c;" in shown and "\\u202eevil\\u200b" in shown


@pytest.mark.parametrize("layout", ["dot", "list"])
def test_hostile_frame_names_are_shown_as_text_never_as_markup(layout: str, tmp_path: Path) -> None:
    if layout == "dot":
        require_tool("dot", "graphviz")
    d = _hostile(tmp_path)
    assert any(HOSTILE.strip()[:20] in r.state for r in d.rows)  # it reached the report: stacks
    logged = [e for f in d.verdict.findings if f.rule.startswith("log-") for e in f.evidence]
    assert any(HOSTILE[:20] in e for e in logged)  # ... and log bodies
    page = render_html(d, layout=layout_svg if layout == "dot" else _no_dot)
    dom = parse_dom(page)
    _assert_inert(page, dom)
    if layout == "dot":
        svg = _svg(page)  # dot's labels hold the hostile text, as text of the SVG
        labels = " ".join(_text(t) for t in svg.iter("text"))
        assert "<script>alert(1)</script>" in labels and SECRET not in labels
        assert not [el.tag for el in svg.iter() if el.tag in ("script", "a", "foreignObject")]


def test_the_page_loads_nothing_and_says_so() -> None:
    """No script, font, image or style sheet from anywhere, and a policy telling the browser to
    load none (defence in depth: whatever a future change writes, the page stays offline)."""
    page = render_html(diagnosed(BUNDLE), layout=_no_dot)
    dom = parse_dom(page)
    policy = next(m for m in dom.find_all("meta") if m.attrs.get("http-equiv"))
    assert policy.attrs["content"].startswith("default-src 'none'")
    assert "script-src 'none'" in policy.attrs["content"]
    assert not inert_problems(dom)


def test_attach_writes_its_html_report_to_the_file_given(tmp_path: Path) -> None:
    """`attach ADDRESS --format html -o FILE` (here a Ray that does not answer: the verdict is
    UNKNOWN, exit 3): the page goes to FILE, nothing to standard output."""
    from tests.integration.cli import run_cli

    out = tmp_path / "report.html"
    proc, _ = run_cli(
        "attach", "http://127.0.0.1:9", "--window", "0", "--timeout", "1", "-q",
        "--format", "html", "-o", str(out), timeout=60,
    )  # fmt: skip
    assert proc.returncode == 3 and proc.stdout == "", proc.stderr
    dom = parse_dom(out.read_text())
    verdict = dom.by_id("verdict")
    assert verdict is not None and "UNKNOWN" in verdict.text and "status-unknown" in verdict.classes
    assert not inert_problems(dom)
