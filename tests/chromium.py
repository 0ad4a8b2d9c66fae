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
