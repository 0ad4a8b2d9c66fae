"""Headless Chromium as a reader of the HTML report: the DOM it renders (`--dump-dom`), the
requests it made while doing so (a net log), and a screenshot (used by the test of the report and
by scripts/make_screenshots.py).

The net log also holds the browser's own requests (component updates, time and account checks):
those have no origin ("initiator": "not an origin"). A request a page makes carries the page's
origin ("null" for a file:// page). Name resolution is turned off for everything but 127.0.0.1,
so the browser's own requests fail at once instead of waiting on DNS."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

CHROMIUM_TIMEOUT_S = 90
BROWSER_OWN = "not an origin"  # the initiator of the browser's own requests in a net log


@dataclass(frozen=True)
class Request:
    url: str
    initiator: str


def _flags(work: Path) -> list[str]:
    return [
        "--headless",
        "--no-sandbox",  # root in CI: Chromium refuses its sandbox to root
        "--disable-gpu",
        "--hide-scrollbars",
        f"--user-data-dir={work / 'profile'}",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-extensions",
        "--disable-default-apps",
        "--disable-domain-reliability",
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
    ]


def dump_dom(chromium: str, page: Path, work: Path) -> tuple[str, list[Request]]:
    """The DOM Chromium rendered for `page`, and every URL request of its net log."""
    work.mkdir(parents=True, exist_ok=True)
    netlog = work / "netlog.json"
    done = subprocess.run(
        [
            chromium,
            *_flags(work),
            f"--log-net-log={netlog}",
            "--net-log-capture-mode=Everything",
            "--dump-dom",
            page.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=CHROMIUM_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0 and done.stdout, done.stderr[-2000:]
    return done.stdout, requests(netlog)


def requests(netlog: Path) -> list[Request]:
    """The URL requests a net log saw start, with who started them."""
    doc = json.loads(netlog.read_text())
    names = {v: k for k, v in doc["constants"]["logEventTypes"].items()}
    out = []
    for event in doc["events"]:
        params = event.get("params") or {}
        if names.get(event["type"]) == "URL_REQUEST_START_JOB" and "url" in params:
            out.append(Request(str(params["url"]), str(params.get("initiator", ""))))
    return out


def page_requests(seen: list[Request]) -> list[Request]:
    """The requests a page made (not the browser's own)."""
    return [r for r in seen if r.initiator != BROWSER_OWN]


def screenshot(chromium: str, page: Path, out: Path, work: Path, size: str = "1280,1500") -> None:
    work.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [
            chromium,
            *_flags(work),
            f"--window-size={size}",
            f"--screenshot={out.resolve()}",
            page.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=CHROMIUM_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0 and out.is_file(), done.stderr[-2000:]


# Run in a copy of the page (its policy removed, so that this one script may run): every text of
# the graph's SVG with the size Chromium draws it at, in CSS pixels of the screen: its computed
# font size (in the SVG's user units) times the scale from those units to the screen
# (getScreenCTM: the viewBox to the element's box, dot's own transform), and its box's height.
_MEASURE = """<pre id="label-sizes"></pre><script>
const out = [];
const svg = document.querySelector('#graph-svg svg');
for (const t of (svg ? svg.querySelectorAll('text') : [])) {
  const g = t.closest('g.node, g.edge, g.cluster');
  const kind = !g ? 'other' : ['node', 'edge', 'cluster'].find(k => g.classList.contains(k));
  const m = t.getScreenCTM();
  const scale = Math.hypot(m.a, m.b);
  const css = parseFloat(getComputedStyle(t).fontSize);
  out.push({kind: kind, id: g ? g.id : '', text: t.textContent, font: css * scale,
            height: t.getBoundingClientRect().height});
}
document.getElementById('label-sizes').textContent =
  JSON.stringify({width: window.innerWidth, labels: out});
</script>"""


@dataclass(frozen=True)
class Label:
    kind: str  # "node", "edge", "cluster"
    id: str  # the SVG id of its node or edge
    text: str
    font_px: float  # the font size on the screen, CSS px
    height_px: float  # its box's height on the screen


def graph_label_sizes(
    chromium: str, page: Path, work: Path, width: int = 1280
) -> tuple[int, list[Label]]:
    """(the window's inner width, every label of the page's wait-for graph) as Chromium lays the
    page out in a window `width` CSS px wide."""
    work.mkdir(parents=True, exist_ok=True)
    text = page.read_text(encoding="utf-8")
    head, policy, rest = text.partition('<meta http-equiv="Content-Security-Policy"')
    assert policy, "the page has no policy to lift"
    measured = work / "measured.html"
    measured.write_text(
        head + rest.split(">", 1)[1].replace("</body>", _MEASURE + "</body>", 1), encoding="utf-8"
    )
    done = subprocess.run(
        [chromium, *_flags(work), f"--window-size={width},1500", "--dump-dom", measured.as_uri()],
        capture_output=True,
        text=True,
        timeout=CHROMIUM_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0 and done.stdout, done.stderr[-2000:]
    from tests.html_dom import parse_dom

    pre = parse_dom(done.stdout).by_id("label-sizes")
    assert pre is not None and pre.text, "the measuring script did not run"
    doc = json.loads(pre.text)
    labels = [
        Label(x["kind"], x["id"], x["text"], float(x["font"]), float(x["height"]))
        for x in doc["labels"]
    ]
    return int(doc["width"]), labels
