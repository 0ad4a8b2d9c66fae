"""Regenerate the report screenshots (docs/img/*.svg) and the renderer goldens (tests/fixtures/golden/).

Both come from the hand-built example diagnoses in tests/unit/render_diagnoses.py, so the pictures
in docs/reports.md and the goldens the tests compare against always show the same reports.

    python scripts/make_screenshots.py          # rewrite everything, list what changed
    python scripts/make_screenshots.py --check  # write nothing; exit 1 if anything is out of date
    python scripts/make_screenshots.py --html   # the HTML report and its screenshot (docs/img/)

`--html` writes the HTML report of a recorded demo bundle (docs/img/report-demo-health-check.html)
and a PNG of it as headless Chromium shows it (docs/img/report-html.png): it needs Graphviz's dot
and Chromium (Debian: `apt-get install graphviz chromium`). A PNG is not byte-for-byte
reproducible (fonts, Chromium's version), so `--check` leaves both out.

Review the diff of tests/fixtures/golden/ after a rewrite: it is the change in what users see.
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402

from slime_hangdoctor.render import render_terminal  # noqa: E402
from tests.unit.render_diagnoses import GOLDEN, all_diagnoses, goldens  # noqa: E402

IMG = ROOT / "docs" / "img"
SCREENSHOTS = {"hung": "report-hung.svg", "progressing": "report-progressing.svg"}
WIDTH = 100


def screenshot(name: str) -> str:
    """The terminal report of example `name` as an SVG, as a colour terminal shows it."""
    console = Console(
        width=WIDTH,
        record=True,
        force_terminal=True,
        color_system="truecolor",
        no_color=False,
        file=io.StringIO(),
    )
    render_terminal(all_diagnoses()[name], console)
    return console.export_svg(title=f"slime-hangdoctor diagnose ({name})")


# Real diagnoses: live demo bundles recorded by `attach --out` (tests/fixtures/analysis/demo/) and the
# real 2x H200 broadcast hang, analysed by today's code.
REAL = {
    "report-demo-weight-sync.svg": ROOT
    / "tests/fixtures/analysis/demo/weight_sync_engine_missing.tar.gz",
    "report-demo-reward.svg": ROOT / "tests/fixtures/analysis/demo/reward_hang.tar.gz",
    "report-h200-broadcast.svg": ROOT / "tests/fixtures/bundles/gpu-2xh200-nccl-broadcast-hang",
}


def real_screenshot(bundle: Path) -> str:
    """The terminal report of a real bundle, as `slime-hangdoctor analyse` prints it."""
    import dataclasses

    from slime_hangdoctor.pipeline import analyse_bundle

    diagnosis = analyse_bundle(bundle).diagnosis
    diagnosis = dataclasses.replace(
        diagnosis, verdict=dataclasses.replace(diagnosis.verdict, elapsed_s=0.0)
    )
    console = Console(
        width=WIDTH,
        record=True,
        force_terminal=True,
        color_system="truecolor",
        no_color=False,
        file=io.StringIO(),
    )
    render_terminal(diagnosis, console)
    return console.export_svg(title=f"slime-hangdoctor analyse {bundle.name}")


def wanted() -> dict[Path, str]:
    files = {IMG / svg: screenshot(name) for name, svg in SCREENSHOTS.items()}
    files.update({IMG / svg: real_screenshot(bundle) for svg, bundle in REAL.items()})
    files.update({GOLDEN / name: text for name, text in goldens().items()})
    return files


HTML_BUNDLE = ROOT / "tests/fixtures/analysis/demo/weight_sync_health_check_queued.tar.gz"
HTML_PAGE = IMG / "report-demo-health-check.html"
HTML_PNG = IMG / "report-html.png"
# (bundle, page, PNG): the page above, and the actor-queue cycle's (a cycle drawn as one)
HTML_SHOTS = (
    (HTML_BUNDLE, HTML_PAGE, HTML_PNG),
    (
        ROOT / "tests/fixtures/analysis/demo/actor_queue_cycle.tar.gz",
        IMG / "report-demo-actor-queue-cycle.html",
        IMG / "report-html-cycle.png",
    ),
)


def html_screenshot() -> int:
    """The HTML reports of HTML_SHOTS' bundles (elapsed set to 0, as the terminal screenshots),
    and their PNGs."""
    import dataclasses
    import shutil
    import tempfile

    from slime_hangdoctor.pipeline import analyse_bundle
    from slime_hangdoctor.render.html import render_html
    from tests.chromium import screenshot as take

    chromium = shutil.which("chromium")
    if chromium is None or shutil.which("dot") is None:
        print("--html needs chromium and dot (Debian: apt-get install graphviz chromium)")
        return 1
    for bundle, page, png in HTML_SHOTS:
        diagnosis = analyse_bundle(bundle).diagnosis
        diagnosis = dataclasses.replace(
            diagnosis, verdict=dataclasses.replace(diagnosis.verdict, elapsed_s=0.0)
        )
        page.write_text(render_html(diagnosis), encoding="utf-8")
        with tempfile.TemporaryDirectory() as work:
            take(chromium, page, png, Path(work), size="1280,1400")
        print(f"wrote: {page.relative_to(ROOT)}, {png.relative_to(ROOT)}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report out-of-date files")
    parser.add_argument("--html", action="store_true", help="the HTML report and its PNG only")
    args = parser.parse_args()
    if args.html:
        return html_screenshot()
    files = wanted()
    stale = [path for path, text in files.items() if _read(path) != text]
    for path in stale:
        print(f"{'out of date' if args.check else 'wrote'}: {path.relative_to(ROOT)}")
    if args.check:
        return 1 if stale else 0
    for path in stale:
        text = files[path]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return 0


def _read(path: Path) -> str | None:
    return path.read_text(encoding="utf-8") if path.exists() else None


if __name__ == "__main__":
    sys.exit(main())
