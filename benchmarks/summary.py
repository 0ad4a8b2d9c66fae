"""The summary of docs/performance.md: today's figure for each target, each row from the results
file it cites (benchmarks/results/), with that run's machine and date.

A target measured in several files shows the newest: time to verdict on one node comes from the
lent machine's A/B (`device-ab-issue36-final2.json`), not from the 2-core box's full run of
`latest.json`, whose other benchmarks are the newest there are. `tests/unit/test_perf_summary.py`
derives every row of the doc's summary again from the file it cites.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"
HEADER = ["target", "measured (median, min-max)", "goal", "result", "measured on", "results file"]


@dataclass(frozen=True)
class Row:
    target: str
    measured: str
    goal: str
    result: str
    machine: str
    date: str
    source: str  # the results file's name under benchmarks/results/
    part: str = ""  # the key of the run in that file, where it holds several

    def cells(self) -> list[str]:
        where = f"{self.machine}, {self.date}"
        cited = f"`{self.source}`" + (f" ({self.part})" if self.part else "")
        return [self.target, self.measured, self.goal, self.result, where, cited]


Cells = list[str]  # target, measured, goal, result


def _ran_at(r: dict[str, Any], key: str) -> str:
    """When `latest.json`'s benchmark `key` last ran: its latest partial re-run, else the run."""
    for rerun in reversed(r.get("reruns", [])):
        if key in rerun.get("only", []):
            return str(rerun["started"])
    return str(r.get("started"))


def _latest_ray_stack(r: dict[str, Any]) -> list[Cells]:
    from benchmarks.report import _met

    rs = r.get("ray_stack", {})
    if "ratio" not in rs:
        return []
    return [
        [
            f"2. stack collection vs `ray stack` ({rs['processes']} processes), ratio",
            f"{rs['ratio']['median']:.3f} (first round {rs['ratio_first_round']:.3f}); "
            f"with --native {rs['ratio_native']['median']:.3f}",
            f"<= {rs['target_ratio']}",
            _met(rs["met"]),
        ]
    ]


def _latest_scale(r: dict[str, Any]) -> list[Cells]:
    from benchmarks.report import _met, _s

    sc = r.get("scale", {})
    if "sizes" not in sc:
        return []
    return [
        [
            "3. scale: stack collection growth 16 -> 128 targets",
            f"x{sc['stack_growth']} for x{sc['target_growth']} targets",
            "sub-linear",
            _met(sc["sublinear"]),
        ],
        [
            f"3. scale: `attach --local` at {sc['sizes'][-1]['targets']['median']:.0f} targets",
            _s(sc["sizes"][-1]["wall_s"]),
            f"<= {sc['budget_s']:.1f} s (window 3 s + 5 s)",
            _met(sc["attach_at_largest_s"] <= sc["budget_s"]),
        ],
    ]


def _latest_pause(r: dict[str, Any]) -> list[Cells]:
    from benchmarks.report import _s

    rows: list[Cells] = []
    for t in r.get("pause", {}).get("targets", []):
        b, n = t["modes"]["blocking"], t["modes"]["nonblocking"]
        rows.append(
            [
                f"4. pause of one py-spy dump, busy target with {t['threads']} thread(s)",
                f"blocking: stall {_s(b['longest_stall_ms'], 'ms', 1)}, lost "
                f"{b['lost_ms']['median']:.1f} ms; --nonblocking: stall "
                f"{n['longest_stall_ms']['median']:.1f} ms, lost {n['lost_ms']['median']:.1f} ms",
                "reported",
                "reported",
            ]
        )
    return rows


def _latest_watchdog(r: dict[str, Any]) -> list[Cells]:
    from benchmarks.report import _met, _watchdog_case

    w = _watchdog_case(r, "progressing")
    if "check" not in w:
        return []
    sw = _watchdog_case(r, "stalled")
    stalled, hour = sw.get("check"), sw.get("check_long_stall")
    also = (
        f" (a stall: {100 * stalled['share_of_one_core']:.2f} % before its alert"
        + (f", {100 * hour['share_of_one_core']:.2f} % over its first hour" if hour else "")
        + ")"
        if stalled
        else ""
    )
    return [
        [
            "4. `check` every 60 s on a progressing job, share of one core",
            f"{100 * w['check']['share_of_one_core']:.2f} %{also}",
            "< 1 %",
            _met(w["check"]["met"]),
        ],
        [
            f"4. `watch` at its default --interval {w['watch']['default_interval_s']:.0f} s",
            f"{100 * w['watch']['share_of_one_core']:.2f} %",
            "< 1 %",
            _met(w["watch"]["met"]),
        ],
    ]


def _latest_startup(r: dict[str, Any]) -> list[Cells]:
    from benchmarks.report import _met, _s

    st = r.get("startup", {})
    if "wall_s" not in st:
        return []
    return [
        [
            "5. `slime-hangdoctor --help`",
            _s(st["wall_s"], "s", 3),
            f"< {st['target_s']} s",
            _met(st["met"]),
        ]
    ]


def _latest_memory(r: dict[str, Any]) -> list[Cells]:
    return [
        [
            "5. memory of the CLI during `attach` (peak RSS; with its children)",
            f"{c['cli_peak_rss_mib']['median']:.0f} MiB; "
            f"{c['cli_tree_peak_rss_mib']['median']:.0f} MiB",
            "reported",
            "reported",
        ]
        for c in r.get("verdict", {}).get("configs", [])[:1]
    ]


_LATEST: tuple[tuple[str, Callable[[dict[str, Any]], list[Cells]]], ...] = (
    ("ray_stack", _latest_ray_stack),
    ("scale", _latest_scale),
    ("pause", _latest_pause),
    ("watchdog", _latest_watchdog),
    ("startup", _latest_startup),
    ("verdict", _latest_memory),
)


def _latest(r: dict[str, Any], source: str) -> list[Row]:
    m = r.get("machine", {})
    machine = f"{m.get('nproc')} cores ({m.get('cpu')}), shared"
    return [
        Row(*cells, machine=machine, date=_ran_at(r, key), source=source)  # type: ignore[misc]
        for key, rows in _LATEST
        for cells in rows(r)
    ]


FORMS = {"gcs": "GCS address", "url": "dashboard URL", "local": "no address"}
OVER_WINDOW = (0.8, 1.2)  # issue 36: time to verdict minus the window, median (worst), one node


def _ab(r: dict[str, Any], source: str) -> list[Row]:
    """The lent machine's A/B (benchmarks/ab_verdict.py): the newest tree ("head") per job and
    address form, time to verdict minus the window."""
    rows: list[Row] = []
    tree = "head"
    git = r.get("git", {}).get(tree, tree)
    for fault, f in r.get("faults", {}).items():
        for form, by_tree in f.get("forms", {}).items():
            m = by_tree.get(tree)
            if not m:
                continue
            median, worst = m["over_window_median_s"], m["over_window_worst_s"]
            ok = median <= OVER_WINDOW[0] and worst <= OVER_WINDOW[1]
            rows.append(
                Row(
                    f"1. time to verdict, one node: `attach` ({FORMS.get(form, form)}), demo "
                    f"`{fault}`, {git}",
                    f"window + {median:.2f} s (worst + {worst:.2f} s, "
                    f"{len(m['over_window_runs_s'])} runs)",
                    f"window + {OVER_WINDOW[0]} s (worst + {OVER_WINDOW[1]} s)",
                    "**met**" if ok else "**missed**",
                    machine=str(r.get("machine")),
                    date=str(r.get("started")),
                    source=source,
                )
            )
    return rows


NODES_GOAL_S = 2.0  # issue 46: window + 2 s at 64 nodes


def _nodes(r: dict[str, Any], source: str) -> list[Row]:
    """Real raylets (benchmarks/device_nodes.py): the newest tree, per node count and form."""
    rows: list[Row] = []
    machine = str(r.get("machine", "")).split(";")[0]
    git = r.get("git", {}).get("new", "new")
    for key, part in r.items():
        spread = part.get("spread") if isinstance(part, dict) else None
        if not isinstance(spread, dict):
            continue
        for form, by_tree in spread.items():
            m = by_tree.get("new")
            if not m:
                continue
            nodes = max(m.get("nodes_inspected") or [part.get("nodes", 0)])
            median, worst = m["over_window_median_s"], m["over_window_worst_s"]
            rows.append(
                Row(
                    f"1. time to verdict, {nodes} real raylets: `attach` "
                    f"({FORMS.get(form, form)}), {git}",
                    f"window + {median:.2f} s (worst + {worst:.2f} s, {len(m['runs'])} runs)",
                    f"window + {NODES_GOAL_S} s",
                    "**met**" if median <= NODES_GOAL_S else "**missed**",
                    machine=machine,
                    date=str(r.get("started")),
                    source=source,
                    part=key,
                )
            )
    return rows


SCALED_GOAL_S = 1.0  # issue 46: analysis + text report at 64 nodes, on a 16-core machine
SCALED_GOAL_NODES = 64


def _scaled(r: dict[str, Any], source: str) -> list[Row]:
    """benchmarks/bench_scaled_analysis.py: analysis + text report at 64 nodes (the target's
    size), else at the largest N measured."""
    sizes = [z for z in r.get("sizes", []) if "analysis" in z]
    if not sizes:
        return []
    z = next((z for z in sizes if z["nodes"] == SCALED_GOAL_NODES), sizes[-1])
    both = z["analysis"]["wall_s"] + z["text"]["wall_s"]
    cpu = z["analysis"]["cpu_s"] + z["text"]["cpu_s"]
    m = r.get("machine", {})
    if both <= SCALED_GOAL_S:
        met = "**met**"
    elif cpu <= SCALED_GOAL_S:
        met = "**met in CPU**, wall missed on 2 shared cores (section 3a)"
    else:
        met = "**missed** (on 2 shared cores, section 3a)"
    return [
        Row(
            f"1. analysis + text report, {z['nodes']} nodes scaled ({z['processes']} processes)",
            f"{both:.2f} s wall, {cpu:.2f} s CPU (analysis {z['analysis']['wall_s']:.2f} s, "
            f"text {z['text']['wall_s']:.2f} s); culprit named: "
            + ("yes" if z["culprit_named"] else "no"),
            f"<= {SCALED_GOAL_S} s at 64 nodes on 16 cores",
            met,
            machine=f"{m.get('nproc')} cores ({m.get('cpu')}), shared",
            date=str(r.get("started")),
            source=source,
        )
    ]


SOURCES: dict[str, Callable[[dict[str, Any], str], list[Row]]] = {
    "device-ab-issue36-final2.json": _ab,
    "device-nodes-probe-boot.json": _nodes,
    "device-nodes-issue46.json": _nodes,  # 32 and 64 real raylets (issue 46 item 3)
    "scaled-analysis.json": _scaled,
    "latest.json": _latest,
}


def rows_from(name: str, results: dict[str, Any]) -> list[Row]:
    """The summary's rows that the results file `name` (its parsed JSON) gives."""
    return SOURCES[name](results, name)


def rows(results_dir: Path = RESULTS_DIR) -> list[Row]:
    out: list[Row] = []
    for name in SOURCES:
        path = results_dir / name
        if path.exists():
            out.extend(rows_from(name, json.loads(path.read_text())))
    return out


def section(results_dir: Path = RESULTS_DIR) -> str:
    from benchmarks.report import _table

    return _table(HEADER, [r.cells() for r in rows(results_dir)])
