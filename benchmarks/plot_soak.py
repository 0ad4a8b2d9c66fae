"""The soak's picture (issue 43, item 2): `watch`'s RSS, open fds, threads and live children over
the run, the armed phases shaded, the disruptions (head restart, job restart, the full disk) and
each alert marked, from bench_soak's JSON.

    python -m benchmarks.plot_soak benchmarks/results/soak-issue43.json docs/img/soak-issue43.png

Needs matplotlib (`pip install matplotlib`: a maintainer's tool, not a dependency of the doctor).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

EVENT_MARKS = {
    "head stopped": ("head restart", "tab:red"),
    "job stopped": ("job restart", "tab:purple"),
}


def _minutes(t: float) -> float:
    return t / 60.0


def plot(result: dict[str, Any], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in result["samples"] if "rss_kib" in r]
    t = [_minutes(r["t"]) for r in rows]
    summary = result.get("summary", {})
    fig, axes = plt.subplots(3, 1, figsize=(11, 8), sharex=True, constrained_layout=True)
    rss, fds, kids = axes
    rss.plot(t, [r["rss_kib"] / 1024 for r in rows], color="tab:blue", lw=1)
    rss.set_ylabel("RSS (MiB)")
    slope = summary.get("rss_slope_kib_per_hour")
    title = "slime-hangdoctor watch --interval 1: its own process"
    if slope is not None:
        title += f" (RSS slope after warm-up {slope / 1024:.1f} MiB/h)"
    rss.set_title(title)
    fds.plot(t, [r["fds"] for r in rows], color="tab:green", lw=1, label="open fds")
    fds.plot(t, [r["threads"] for r in rows], color="tab:orange", lw=1, label="threads")
    fds.legend(loc="upper left")
    fds.set_ylabel("count")
    kids.plot(t, [r["children"] for r in rows], color="tab:gray", lw=1, label="live children")
    kids.plot(
        t, [r.get("stall_bundles", 0) for r in rows], color="black", lw=1.5, label="stall bundles"
    )
    kids.axhline(summary.get("keep", 0), color="black", ls=":", lw=1, label="--keep")
    kids.set_ylabel("count")
    kids.set_xlabel("minutes")
    kids.legend(loc="upper left")
    for ph in summary.get("armed_phases", []):
        for ax in axes:
            ax.axvspan(_minutes(ph["from"]), _minutes(ph["to"]), color="tab:red", alpha=0.08)
    warm = summary.get("warmup_s")
    for e in result.get("events", []):
        mark = EVENT_MARKS.get(e["event"])
        if mark is not None:
            for ax in axes:
                ax.axvline(_minutes(e["t"]), color=mark[1], ls="--", lw=1)
            rss.annotate(mark[0], (_minutes(e["t"]), 0.02), xycoords=("data", "axes fraction"))
    full = [r for r in result["samples"] if r.get("disk_full")]
    if full:
        for ax in axes:
            ax.axvspan(
                _minutes(full[0]["t"]), _minutes(full[-1]["t"]), color="tab:brown", alpha=0.2
            )
        rss.annotate("disk full", (_minutes(full[0]["t"]), 0.9), xycoords=("data", "axes fraction"))
    if warm:
        rss.axvline(_minutes(warm), color="gray", ls=":", lw=1)
        rss.annotate("warm-up", (_minutes(warm), 0.9), xycoords=("data", "axes fraction"))
    for a in summary.get("alerts_t", []):  # each alert (the on-stall hook's clock)
        rss.axvline(_minutes(a), color="tab:red", lw=2, alpha=0.6)
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=90)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    plot(json.loads(Path(argv[0]).read_text()), Path(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
