"""The HTML report as a person looks at it: `slime-hangdoctor analyse BUNDLE --format html -o FILE`
on recorded demo bundles, opened by Debian's headless Chromium. The test reads the DOM Chromium
rendered (`--dump-dom`) and the requests of its net log (tests/chromium.py): the culprit's node is
there and highlighted, every edge of the wait-for graph has its label, and the page made no
request (the one file it is). Chromium and Graphviz are installed by apt where the test runs as
root on a Debian-like machine (CI), else it is skipped with the reason printed.

A control shows the net log would see a request: the same page with an image from a local
server added (and its policy removed) is caught by the same check."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from slime_hangdoctor.pipeline import analyse_bundle
from slime_hangdoctor.render.html import render_html
from slime_hangdoctor.render.jsonout import report_json
from slime_hangdoctor.render.wait_graph import KIND_WORDS
from slime_hangdoctor.verdict import WaitKind
from tests.chromium import dump_dom, graph_label_sizes, page_requests, screenshot
from tests.debian_tools import require_tool
from tests.fixtures.transforms import diagnosis_replicated
from tests.html_dom import inert_problems, parse_dom
from tests.integration.cli import run_cli
from tests.unit.demo_bundles import DEMO
from tests.unit.test_render_html import SECRET, hostile_bundle

pytestmark = [pytest.mark.slow]

BUNDLE = DEMO / "weight_sync_health_check_queued.tar.gz"
RECORDED = DEMO.parents[1] / "bundles"  # the GPU bundles (directories)
SMALL = RECORDED / "gpu-h200-broadcast-hang"  # three processes, one wait
CYCLE = DEMO / "actor_queue_cycle.tar.gz"  # a cycle of two queue waits among 14
MIN_LABEL_PX = 11.0  # the report draws none under 12 px at 1280 px; 11 leaves fonts some room


@pytest.fixture(scope="module")
def chromium() -> str:
    require_tool("dot", "graphviz")
    return require_tool("chromium", "chromium")


def _report(bundle: Path, out: Path) -> dict[str, Any]:
    """The CLI's HTML report of `bundle` written to `out`, and the JSON report of the same."""
    proc, _ = run_cli("analyse", str(bundle), "--format", "html", "-o", str(out), timeout=120)
    assert proc.returncode in (0, 1, 2) and not proc.stdout, proc.stderr
    assert out.is_file()
    return report_json(analyse_bundle(bundle).diagnosis)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    page = tmp_path_factory.mktemp("report") / "report.html"
    return page, _report(BUNDLE, page)


def test_chromium_shows_the_graph_the_culprit_and_every_labelled_wait_offline(
    chromium: str, written: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    page, report = written
    waits = report["waits"]
    culprits = report["culprits"]
    assert isinstance(waits, list) and isinstance(culprits, list) and culprits
    dom_text, seen = dump_dom(chromium, page, tmp_path / "chromium")
    assert not page_requests(seen), page_requests(seen)
    dom = parse_dom(dom_text)
    assert not inert_problems(dom), inert_problems(dom)
    graph = dom.by_id("graph-svg")
    assert graph is not None, "no laid-out graph in the page"
    svg = graph.find_all("svg")
    assert len(svg) == 1
    # the culprit's node: there, marked, and drawn highlighted
    pid = culprits[0]["pid"]
    marked = [g for g in svg[0].find_all("g", "culprit") if "node" in g.classes]
    assert any(f"pid {pid}" in g.text for g in marked), [g.text for g in marked]
    for g in marked:
        shapes = [e for e in g.iter() if e.tag in ("polygon", "path")]
        assert shapes and all(s.attrs.get("stroke") == "#c00000" for s in shapes[:1])
    # every wait is an edge with its label: its number, its kind and the start of its evidence
    edges = {g.attrs.get("id"): g for g in svg[0].find_all("g", "edge")}
    assert len(edges) == len(waits) >= 5
    for i, w in enumerate(waits, 1):
        g = edges[f"w{i}"]
        label = " ".join(t.text for t in g.find_all("text"))
        assert label.startswith(f"{i}. {KIND_WORDS[WaitKind(w['kind'])]}"), label
        assert w["evidence"][0][:12] in label, (label, w["evidence"][0])
    # the rest of the report is there for the reader too
    for section in ("verdict", "timeline", "processes", "stack", "findings", "next-steps"):
        assert dom.by_id(section) is not None, section
    details = dom.find_all("details")
    assert details and dom.by_id("raw-evidence") is not None
    # and a screenshot (docs/img/report-html.png is made by scripts/make_screenshots.py --html)
    shot = tmp_path / "shot.png"
    screenshot(chromium, page, shot, tmp_path / "chromium-shot")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


def test_chromium_shows_hostile_text_as_text(chromium: str, tmp_path: Path) -> None:
    """Frame names and log lines carrying markup, dot escapes, bidi characters and a bearer token
    (derived from the recorded stacks and log bodies by named transformations): the page Chromium
    builds runs nothing, loads nothing, and shows the text as written, the secret blanked."""
    bundle = hostile_bundle(tmp_path)
    page = tmp_path / "hostile.html"
    _report(bundle, page)
    dom_text, seen = dump_dom(chromium, page, tmp_path / "chromium")
    assert not page_requests(seen), page_requests(seen)
    dom = parse_dom(dom_text)
    assert not inert_problems(dom), inert_problems(dom)
    assert SECRET not in dom_text and "\u202e" not in dom_text
    assert "</text></svg><script>alert(1)</script>" in dom.text


def _recorded() -> list[Path]:
    return sorted(DEMO.glob("*.tar.gz")) + sorted(p for p in RECORDED.iterdir() if p.is_dir())


def biggest_recorded_bundle() -> Path:
    """The recorded bundle with the most processes (rows of the process table; then most waits)."""
    sizes = {}
    for path in _recorded():
        try:
            d = analyse_bundle(path).diagnosis
        except Exception:  # a bundle kept for its unreadable manifest (gpu-h200-runs)
            continue
        sizes[path] = (len(d.rows), len(d.waits))
    return max(sizes, key=lambda p: sizes[p])


@pytest.mark.parametrize("which", ["biggest", "small", "cycle", "grown-1500"])
def test_chromium_draws_every_graph_label_at_a_readable_size_at_1280_px(
    chromium: str, which: str, tmp_path: Path
) -> None:
    """At 1280 px, every node and edge label of the graph is drawn at 11 px or more on the
    screen (the SVG keeps its natural size; its box scrolls): measured in Chromium, on the
    biggest recorded bundle, a small one, the actor-queue cycle, and the cycle grown to 1,500
    processes (transforms.diagnosis_replicated; alike processes folded)."""
    page = tmp_path / "report.html"
    if which == "grown-1500":
        recorded = analyse_bundle(CYCLE).diagnosis
        d = diagnosis_replicated(recorded, -(-1500 // len(recorded.rows)))
        page.write_text(render_html(d), encoding="utf-8")
    else:
        bundle = {
            "biggest": biggest_recorded_bundle,
            "small": lambda: SMALL,
            "cycle": lambda: CYCLE,
        }
        path = bundle[which]()
        _report(path, page)
        d = analyse_bundle(path).diagnosis
    width, labels = graph_label_sizes(chromium, page, tmp_path / "chromium")
    assert width == 1280
    nodes = [x for x in labels if x.kind == "node"]
    edges = [x for x in labels if x.kind == "edge"]
    assert nodes and (edges or not d.waits), (which, labels)
    small = [x for x in nodes + edges if x.font_px < MIN_LABEL_PX]
    assert not small, (which, [(x.id, x.text, round(x.font_px, 1)) for x in small[:5]])
    assert all(x.height_px >= MIN_LABEL_PX for x in nodes + edges if x.text.strip())


class _Probe(BaseHTTPRequestHandler):
    hits: list[str] = []

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.hits.append(self.path)
        self.send_response(204)
        self.end_headers()


@pytest.fixture()
def probe_server() -> Iterator[tuple[str, list[str]]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Probe)
    hits: list[str] = []
    _Probe.hits = hits
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", hits
    finally:
        server.shutdown()
        server.server_close()


def test_the_check_sees_a_request_a_page_makes(
    chromium: str,
    written: tuple[Path, dict[str, Any]],
    tmp_path: Path,
    probe_server: tuple[str, list[str]],
) -> None:
    """The control: the report with an image from a local server added and its policy removed
    makes a request, and the net-log check catches it (so an empty list above means something)."""
    url, hits = probe_server
    text = written[0].read_text()
    head, policy, rest = text.partition('<meta http-equiv="Content-Security-Policy"')
    assert policy
    rest = rest.split(">", 1)[1]
    leaky = tmp_path / "leaky.html"
    leaky.write_text(head + rest.replace("<main>", f'<main><img src="{url}/probe.png">', 1))
    _dom, seen = dump_dom(chromium, leaky, tmp_path / "chromium")
    assert [r.url for r in page_requests(seen)] == [f"{url}/probe.png"]
    assert hits == ["/probe.png"]
