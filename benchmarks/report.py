"""docs/performance.md from the results of benchmarks/run.py (numbers only come from the JSON;
the analysis of misses and fixes is benchmarks/findings.md, included verbatim)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

FINDINGS = Path(__file__).resolve().parent / "findings.md"
RESULTS_DIR = Path(__file__).resolve().parent / "results"
SCALED = "scaled-analysis.json"  # benchmarks/bench_scaled_analysis.py
SCALED_BEFORE = "scaled-analysis-before-fixes.json"  # the same, before its fixes (issue 46)
# the same, of the tree before the reports grouped a large job's processes, alternated with it
SCALED_UNGROUPED = "scaled-analysis-before-grouping.json"


def _s(v: Any, unit: str = "s", digits: int = 2) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, dict):
        if not v:
            return "n/a"
        med, lo, hi = v.get("median"), v.get("min"), v.get("max")
        if lo == hi or v.get("n", 1) == 1:
            return f"{med:.{digits}f} {unit}".strip()
        shown = f"{med:.{digits}f} {unit}".strip()
        return f"{shown} ({lo:.{digits}f}-{hi:.{digits}f})"
    return f"{float(v):.{digits}f} {unit}".strip()


def _met(ok: Any) -> str:
    return "**met**" if ok else "**missed**"


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _load(load: dict[str, Any] | None) -> str:
    if not load:
        return "n/a"
    la = load.get("loadavg", [])
    return (
        f"load average {la[0]:.2f} / {la[1]:.2f} / {la[2]:.2f}, "
        f"{load.get('processes')} processes, {load.get('ray_or_sglang_titled_processes')} "
        "ray::/sglang:: titled"
    )


# --------------------------------------------------------------------------- sections


def _machine(r: dict[str, Any]) -> str:
    m = r.get("machine", {})
    rows = [
        ["CPU", f"{m.get('nproc')} cores ({m.get('cpu')})"],
        ["RAM", f"{m.get('ram_gib')} GiB"],
        ["kernel", str(m.get("kernel"))],
        ["OS", str(m.get("os"))],
        ["Python", str(m.get("python"))],
        ["ray", str(m.get("ray"))],
        ["py-spy", str(m.get("py-spy"))],
        ["psutil / typer / rich", f"{m.get('psutil')} / {m.get('typer')} / {m.get('rich')}"],
        ["slime-hangdoctor", f"{m.get('slime-hangdoctor')} (git {m.get('git')})"],
        ["CLI measured", f"`{m.get('cli')}`"],
        ["run", f"{r.get('started')}, {r.get('duration_s')} s"],
        ["machine load at start", _load(r.get("load_start"))],
        ["machine load at end", _load(r.get("load_end"))],
    ]
    for rerun in r.get("reruns", []):
        rows.append(
            [
                "re-run since",
                f"{', '.join(rerun['only'])} at {rerun['started']} (git {rerun.get('git')})",
            ]
        )
    return _table(["", ""], rows)


def _verdict(r: dict[str, Any]) -> str:
    v = r.get("verdict", {})
    if "error" in v:
        return f"Not measured: {v['error']}"
    parts: list[str] = []
    for c in v.get("configs", []):
        extra = " " + " ".join(c["extra_args"]) if c["extra_args"] else ""
        parts.append(
            f"### Demo `{c['fault']}`{extra}: {c['slime_processes']} slime processes on one node\n\n"
            f"`attach URL --quiet` (text report), {c['wall_s']['n']} runs: **{_s(c['wall_s'])}** "
            f"(goal {c['budget_s']:.1f} s: {_met(c['met'])}); exit codes {c['exit_codes']}; "
            f"CPU of the CLI and its children {_s(c['cli_cpu_s'])}; peak RSS of the CLI "
            f"{_s(c['cli_peak_rss_mib'], 'MiB', 0)}, with its children "
            f"{_s(c['cli_tree_peak_rss_mib'], 'MiB', 0)}. Machine: {_load(c.get('load'))}.\n"
        )
        runs = c["breakdown_runs"]
        phase_names = list(runs[0]["phases"])
        rows = [[p, *[f"{b['phases'][p]:.3f}" for b in runs]] for p in phase_names]
        rows.append(
            [
                "  of which analysis (re-timed)",
                *[f"{b['analysis_render']['analysis_s']:.3f}" for b in runs],
            ]
        )
        rows.append(
            [
                "  of which render (re-timed)",
                *[f"{b['analysis_render']['render_s']:.3f}" for b in runs],
            ]
        )
        parts.append(
            "Breakdown (runs with `--out`, which also write the .tar.gz), seconds:\n\n"
            + _table(["phase", *[f"run {i + 1}" for i in range(len(runs))]], rows)
        )
        mid = sorted(runs, key=lambda b: b["phases"]["total"])[len(runs) // 2]
        prow = [
            [
                kind,
                str(p["count"]),
                f"{p['span_s']:.3f}",
                f"{p['sum_s']:.3f}",
                f"{p['max_s']:.3f}",
                ", ".join(f"{k} {n}" for k, n in p["outcomes"].items()),
            ]
            for kind, p in mid["probes"].items()
        ]
        parts.append(
            f"Probes of the median run ({mid['phases']['total']:.2f} s), by kind and sample "
            "(span = first start to last end; probes of one kind run concurrently):\n\n"
            + _table(["probe [sample]", "count", "span s", "sum s", "max s", "outcomes"], prow)
        )
    return "\n\n".join(parts)


def _ray_stack(r: dict[str, Any]) -> str:
    rs = r.get("ray_stack", {})
    if "error" in rs:
        return f"Not measured: {rs['error']}"
    if "rounds" not in rs:
        return "Not measured."
    rows = []
    for i, x in enumerate(rs["rounds"]):
        ray = x["ray_stack"]
        rows.append(
            [
                str(i + 1),
                x["order"],
                str(len(ray["pids"])),
                f"{ray['wall_s']:.2f}",
                f"{ray['dump_loop_s']:.2f}",
                f"{x['ours']['wall_s']:.3f}",
                f"{x['ours_native']['wall_s']:.2f}",
                f"{x['ratio']:.3f}",
                f"{x['ratio_native']:.3f}",
                "yes" if x.get("same_pids") else "no",
            ]
        )
    table = _table(
        [
            "round",
            "order",
            "processes",
            "`ray stack` wall s",
            "its dump loop s",
            "ours s",
            "ours --native s",
            "ratio",
            "ratio --native",
            "same pids",
        ],
        rows,
    )
    titles = rs["rounds"][0]["ray_stack"].get("titles")
    picked = (
        f"`ray stack` picks its processes with `ps aux | grep -E ' ray::|default_worker.py'`: here "
        f"{', '.join(f'`{t}`' for t in titles)} (every `ray::` process, Ray's agents and idle "
        "workers included; not the driver, nor the SGLang server, scheduler and detokenizer "
        "children that `attach` dumps); ours dumps the same pids. "
        if titles
        else ""
    )
    return (
        f"{table}\n\n{picked}Ratio = our wall time / `ray stack`'s wall time in the same round. Median "
        f"ratio {rs['ratio']['median']:.3f} (Python stacks, the product's default) and "
        f"{rs['ratio_native']['median']:.3f} with `--native` (what `ray stack` collects): "
        f"{_met(rs['met'])} (goal <= {rs['target_ratio']}). Against `ray stack`'s dump loop alone "
        f"(without its ~{rs['rounds'][0]['ray_stack']['cli_overhead_s']:.1f} s of CLI start-up): "
        f"{rs['rounds'][0]['ratio_vs_dump_loop']:.3f} and "
        f"{rs['rounds'][0]['ratio_native_vs_dump_loop']:.3f} in round 1. "
        f"Machine: {_load(rs.get('load'))}."
    )


def _scale(r: dict[str, Any]) -> str:
    sc = r.get("scale", {})
    if "error" in sc:
        return f"Not measured: {sc['error']}"
    if "sizes" not in sc:
        return "Not measured."
    rows = []
    for s in sc["sizes"]:
        rows.append(
            [
                str(s["requested"]),
                f"{s['targets']['median']:.0f}",
                _s(s["stack_s"]),
                _s(s["ms_per_target"], "", 1) if "ms_per_target" in s else "n/a",
                _s(s["process_scan_s"], "s", 3),
                _s(s["wall_s"]),
                _s(s["cli_cpu_s"]),
                _s(s["cli_peak_rss_mib"], "MiB", 0),
            ]
        )
    table = _table(
        [
            "titled processes",
            "targets dumped",
            "stack collection per sample",
            "ms per target",
            "process scan",
            "`attach --local` wall",
            "CPU (CLI + py-spy)",
            "CLI peak RSS",
        ],
        rows,
    )
    return (
        f"{table}\n\nStack collection is one sample's first dump start to last dump end (both "
        "samples of each `--out` run, two rounds over the sizes in alternating order); ms per "
        "target is that divided by the targets dumped.\n\n"
        f"Stack collection grew x{sc['stack_growth']} for x{sc['target_growth']} "
        f"targets: {'sub-linear' if sc['sublinear'] else 'not sub-linear'} "
        f"({_met(sc['sublinear'])}); `attach` at the largest size took "
        f"{sc['attach_at_largest_s']:.2f} s (goal {sc['budget_s']:.1f} s: "
        f"{_met(sc['attach_at_largest_s'] <= sc['budget_s'])}). Machine at the largest size: "
        f"{_load(sc['sizes'][-1].get('load'))}."
    )


def _scaled(path: Path) -> str:
    """Section 3a from `path` (benchmarks/bench_scaled_analysis.py's results)."""
    if not path.exists():
        return f"Not measured (no `benchmarks/results/{path.name}`)."
    import json

    r = json.loads(path.read_text())
    m, la = r.get("machine", {}), r.get("load_start", {}).get("loadavg", [])
    rows = []
    for z in r.get("sizes", []):
        if "analysis" not in z:
            rows.append([str(z["nodes"]), "failed", *[""] * 7])
            continue
        rows.append(
            [
                str(z["nodes"]),
                str(z["processes"]),
                f"{z['analysis']['wall_s']:.2f} s ({z['analysis']['cpu_s']:.2f})",
                *(f"{z[f]['wall_s']:.2f} s ({z[f]['cpu_s']:.2f})" for f in _FORMATS),
                f"{z['peak_rss_mib']:.0f} MiB",
                "yes" if z["culprit_named"] else "**no**",
            ]
        )
    head = [
        "nodes",
        "processes",
        "analysis: wall (CPU)",
        *(f"{f}: wall (CPU)" for f in _FORMATS),
        "peak RSS",
        "culprit named",
    ]
    return (
        f"`python -m benchmarks.bench_scaled_analysis` (recording `{r.get('recording')}`, grown "
        "by `tests/fixtures/scaled.py` `scaled_bundle`: each node 8 train ranks and a TP-8 "
        "engine, the recorded stuck rank kept on node 0). Each run in a fresh interpreter: the "
        "analysis (`build_topology`, `diagnose`, the timeline, as `analyse` runs them after "
        "loading the bundle; the bundle's load is not in these figures) and each report format "
        f"from its Diagnosis; medians of {len(r['sizes'][0]['runs'])} runs, rounds in "
        f"alternating order. Machine: {m.get('nproc')} cores ({m.get('cpu')}), git "
        f"{m.get('git')}, {r.get('started')}, load average "
        f"{' / '.join(str(x) for x in la)} at the start: **a shared, loaded 2-core box**, not "
        "the 16-core machine the issue's 1 s target names.\n\n" + _table(head, rows)
    )


_FORMATS = ("text", "json", "markdown", "html")


def _scaled_ungrouped(path: Path, now: Path) -> str:
    """The same sizes on the tree before the text report grouped alike processes (its runs
    alternated with this tree's), beside this tree's: analysis + text, wall and CPU."""
    if not path.exists() or not now.exists():
        return ""
    import json

    r, n = json.loads(path.read_text()), json.loads(now.read_text())
    mine = {z["nodes"]: z for z in n.get("sizes", []) if "analysis" in z}
    rows = []
    for z in r.get("sizes", []):
        y = mine.get(z["nodes"])
        if "analysis" not in z or y is None:
            continue
        rows.append(
            [
                str(z["nodes"]),
                str(z["processes"]),
                *(
                    f"{w['analysis'][k] + w['text'][k]:.2f} s (text {w['text'][k]:.2f})"
                    for k in ("cpu_s", "wall_s")
                    for w in (z, y)
                ),
            ]
        )
    head = [
        "nodes",
        "processes",
        "CPU: before",
        "CPU: now",
        "wall: before",
        "wall: now",
    ]
    return (
        f"\n\nAnalysis + text report, before the text report grouped a large job's alike "
        f"processes (git {r.get('machine', {}).get('git')}, every process a row of a rich "
        f"table) and now (git {n.get('machine', {}).get('git')}, `render/rows.py`: at most 40 "
        "rows), each size's runs alternating between the two trees in the same rounds "
        f"(`--base`; `benchmarks/results/{path.name}`); medians, seconds:\n\n" + _table(head, rows)
    )


def _scaled_before(path: Path) -> str:
    """The analysis's own figures before the fixes the benchmark led to, where kept."""
    if not path.exists():
        return ""
    import json

    r = json.loads(path.read_text())
    rows = [
        [
            str(z["nodes"]),
            str(z["processes"]),
            f"{z['analysis']['wall_s']:.2f} s ({z['analysis']['cpu_s']:.2f})",
            f"{z['text']['wall_s']:.2f} s ({z['text']['cpu_s']:.2f})",
        ]
        for z in r.get("sizes", [])
        if "analysis" in z
    ]
    la = r.get("load_start", {}).get("loadavg", [])
    return (
        f"\n\nBefore the fixes it led to (git {r.get('machine', {}).get('git')}, "
        f"{r.get('started')}, load average {' / '.join(str(x) for x in la)}; "
        f"`benchmarks/results/{path.name}`): a scan of every process per process in "
        "`build_world` and `World.children_of`, of every process per engine, and the layout "
        "hint computed again for each of ~44,000 frames at 64 nodes, most of them equal.\n\n"
        + _table(["nodes", "processes", "analysis: wall (CPU)", "text: wall (CPU)"], rows)
    )


def _pause(r: dict[str, Any]) -> str:
    p = r.get("pause", {})
    if "error" in p:
        return f"Not measured: {p['error']}"
    rows = []
    for t in p.get("targets", []):
        for mode in ("blocking", "nonblocking", "baseline"):
            m = t["modes"][mode]
            rows.append(
                [
                    str(t["threads"]),
                    mode if mode != "baseline" else "no dump (baseline)",
                    _s(m["dump_ms"], "ms", 1),
                    _s(m["longest_stall_ms"], "ms", 1),
                    _s(m["lost_ms"], "ms", 1),
                ]
            )
    return (
        _table(
            [
                "target threads",
                "py-spy dump",
                "dump wall",
                "target's longest stall",
                "target's lost progress",
            ],
            rows,
        )
        + f"\n\n{p.get('samples')} dumps per mode, interleaved. Machine: {_load(p.get('load'))}."
    )


def _watchdog_case(r: dict[str, Any], case: str) -> dict[str, Any]:
    """One job's watchdog figures; a results file from before the two cases holds the stalled one
    (the default demo) at the top level."""
    w = r.get("watchdog", {})
    if "check" in w:
        return w if case == "stalled" else {}
    out = w.get(case, {})
    return out if isinstance(out, dict) else {}


def _watchdog(r: dict[str, Any]) -> str:
    cases = [
        ("progressing", "a progressing job (`none`)"),
        ("stalled", "a stalled job (default demo)"),
    ]
    rows: list[list[str]] = []
    notes: list[str] = []
    for case, label in cases:
        w = _watchdog_case(r, case)
        if "error" in w:
            notes.append(f"{label}: not measured: {w['error']}")
            continue
        if "check" not in w:
            notes.append(f"{label}: not measured.")
            continue
        c, wa = w["check"], w["watch"]
        rows += [
            [
                f"`check` (cron every 60 s), {label}",
                _s(c["cpu_s"], "s", 3),
                _s(c["wall_s"]),
                f"{100 * c['share_of_one_core']:.2f} %",
                _met(c["met"]),
            ],
            [
                f"`watch --interval {wa['default_interval_s']:.0f}` (default), {label}",
                f"{wa['iteration_cpu_s']:.3f} s per iteration + "
                f"{wa['idle_cpu_per_s'] * 1000:.2f} ms/s idle",
                f"{wa['iteration_wall_s']:.2f} s",
                f"{100 * wa['share_of_one_core']:.2f} %",
                _met(wa["met"]),
            ],
        ]
        rf, ph = w.get("check_refresh"), w.get("check_progressing_hour")
        if rf and ph:
            rows += [
                [
                    f"`check`, {label}, its analysed look every 10 min (the counters plan aged)",
                    _s(rf["cpu_s"], "s", 3),
                    _s(rf["wall_s"]),
                    f"{100 * rf['share_of_one_core']:.2f} %",
                    _met(rf["met"]),
                ],
                [
                    f"`check`, an hour of {label}: {ph['counter_runs']} counters-only looks, "
                    f"{ph['analysed_runs']} analysed",
                    f"{ph['cpu_s_per_run']:.3f} s on average",
                    "",
                    f"{100 * ph['share_of_one_core']:.2f} %",
                    _met(ph["met"])
                    + (" (< 0.5 %: met)" if ph["met_issue_26"] else " (< 0.5 %: missed)"),
                ],
            ]
            notes.append(
                f"{label}: the counters-only look answered {w['check'].get('counters_only', 0)} of "
                f"{len(w['check']['exit_codes'])} steady-state runs."
            )
        aa, ls = w.get("check_after_alert"), w.get("check_long_stall")
        if aa:
            notes.append(
                f"{label}, after its alert: exit codes {aa['exit_codes']}, verdict carried in "
                f"{aa.get('carried', 0)} of {len(aa['exit_codes'])} runs."
            )
            rows.append(
                [
                    f"`check`, {label}, after its alert (verdict carried while nothing moves)",
                    _s(aa["cpu_s"], "s", 3),
                    _s(aa["wall_s"]),
                    f"{100 * aa['share_of_one_core']:.2f} %",
                    _met(aa["met"]),
                ]
            )
        if ls:
            rows.append(
                [
                    f"`check`, an hour of stall (default --stall-after 10m): {ls['full_runs']} "
                    f"full looks, {ls['carried_runs']} carried",
                    f"{ls['cpu_s_per_run']:.3f} s on average",
                    "",
                    f"{100 * ls['share_of_one_core']:.2f} %",
                    _met(ls["met"]),
                ]
            )
        skipped = c.get("stacks_skipped")
        notes.append(
            f"{label}: `check` exit codes {c['exit_codes']}"
            + (
                f", stacks skipped (work moved) in {skipped} of {len(c['exit_codes'])} runs"
                if skipped is not None
                else ""
            )
            + f", peak RSS {_s(c['peak_rss_mib'], 'MiB', 0)}; psutil polling of the same runs saw "
            f"{_s(c['psutil_cpu_s'], 's', 3)} (its last poll misses the final moments). `watch`: "
            f"{wa['iterations']['cpu_s']['n']} iterations of one `watch --interval 1` process, "
            f"CPU {_s(wa['iterations']['cpu_s'], 's', 3)} and wall "
            f"{_s(wa['iterations']['wall_s'])} each; waiting between runs it used "
            f"{wa['idle_cpu_per_s'] * 1000:.2f} ms of CPU per second with "
            f"{wa['threads_while_idle']} thread(s). Machine: {_load(w.get('load'))}."
            + (
                " Libraries: " + ", ".join(f"{k} {v}" for k, v in w["versions"].items()) + "."
                if w.get("versions")
                else ""
            )
        )
    if not rows:
        return "Not measured. " + " ".join(notes)
    return (
        _table(
            ["mode", "CPU per run (CLI + children)", "wall per run", "share of one core", "< 1 %"],
            rows,
        )
        + "\n\nEach job in its steady state (one warm-up run first). `check`: CPU from wait4 (the "
        "CLI and every child it waited for), share = CPU per run / 60 s. On the stalled job, "
        "`check` before the alert takes the full look (two sets of stacks) every run; after it "
        "(measured with `--stall-after 1s`, whose first run alerts) a run in which nothing moved "
        "carries the last full look's verdict, and takes the full look again 10 minutes after "
        "it (docs/watchdog.md); the hour row weighs the two.\n\n"
        + "\n\n".join(f"- {n}" for n in notes)
    )


def _startup(r: dict[str, Any]) -> str:
    st = r.get("startup", {})
    if "error" in st:
        return f"Not measured: {st['error']}"
    if "wall_s" not in st:
        return "Not measured."
    imports = ", ".join(
        f"`{i['module']}` {i['cumulative_ms']} ms" for i in st["slowest_imports"][:6]
    )
    heavy = ", ".join(st["heavy_modules_imported"]) or "none"
    return (
        f"`{' '.join(st['argv'])}`: {_s(st['wall_s'], 's', 3)} over {st['wall_s']['n']} runs "
        f"(first run {st['first_run_s']:.3f} s), peak RSS {_s(st['peak_rss_mib'], 'MiB', 0)}: "
        f"{_met(st['met'])} (goal < {st['target_s']} s); without a bytecode cache "
        f"(PYTHONDONTWRITEBYTECODE=1, every module compiled from source) "
        f"{_s(st.get('wall_s_without_bytecode_cache'), 's', 3)}. Heavy modules imported by "
        f"`--help`: {heavy}. Slowest imports: {imports}.\n\n" + _memory(r)
    )


def _memory(r: dict[str, Any]) -> str:
    rows = []
    for c in r.get("verdict", {}).get("configs", []):
        rows.append(
            [
                f"`attach`, demo `{c['fault']}` ({c['slime_processes']} processes)",
                _s(c["cli_peak_rss_mib"], "MiB", 0),
                _s(c["cli_tree_peak_rss_mib"], "MiB", 0),
            ]
        )
    for sz in r.get("scale", {}).get("sizes", []):
        rows.append(
            [
                f"`attach --local`, {sz['targets']['median']:.0f} targets",
                _s(sz["cli_peak_rss_mib"], "MiB", 0),
                "",
            ]
        )
    check = _watchdog_case(r, "progressing").get("check") or _watchdog_case(r, "stalled").get(
        "check"
    )
    if check:
        rows.append(["`check`", _s(check["peak_rss_mib"], "MiB", 0), ""])
    if not rows:
        return ""
    return "Memory of the CLI (peak RSS, psutil every 20 ms):\n\n" + _table(
        ["run", "CLI process", "CLI and its children (py-spy)"], rows
    )


def _before_after(r: dict[str, Any], b: dict[str, Any] | None) -> str:
    if not b:
        return "No `before-fixes` results stored."
    rows: list[list[str]] = []
    for after, before in zip(
        r.get("verdict", {}).get("configs", []),
        b.get("verdict", {}).get("configs", []),
        strict=False,
    ):
        rows.append(
            [
                f"`attach`, demo `{after['fault']}` ({after['slime_processes']} processes)",
                _s(before["wall_s"]),
                _s(after["wall_s"]),
            ]
        )
        for phase in ("discovery", "sample1", "total"):
            pb = [x["phases"][phase] for x in before["breakdown_runs"]]
            pa = [x["phases"][phase] for x in after["breakdown_runs"]]
            rows.append(
                [
                    f"  phase {phase} (median)",
                    f"{sorted(pb)[len(pb) // 2]:.3f} s",
                    f"{sorted(pa)[len(pa) // 2]:.3f} s",
                ]
            )
    sa, sb = r.get("scale", {}), b.get("scale", {})
    for after, before in zip(sa.get("sizes", []), sb.get("sizes", []), strict=False):
        rows.append(
            [
                f"scale {after['requested']}: stack collection per sample",
                _s(before["stack_s"]),
                _s(after["stack_s"]),
            ]
        )
        rows.append(
            [
                f"scale {after['requested']}: process scan",
                _s(before["process_scan_s"], "s", 3),
                _s(after["process_scan_s"], "s", 3),
            ]
        )
        outs = [x["wall_s"] for x in after.get("breakdowns", [])]
        after_out = sorted(outs)[len(outs) // 2] if outs else None
        rows.append(
            [
                f"scale {after['requested']}: `attach --local --out`",
                _s(before["wall_s"]),
                _s(after_out) if after_out is not None else _s(after["wall_s"]),
            ]
        )
    wa, wb = _watchdog_case(r, "stalled"), _watchdog_case(b, "stalled")
    if "check" in wa and "check" in wb:
        rows.append(
            [
                "`check` CPU per run (stalled job)",
                _s(wb["check"]["cpu_s"], "s", 3),
                _s(wa["check"]["cpu_s"], "s", 3),
            ]
        )
        rows.append(
            [
                "`watch` CPU per iteration (stalled job)",
                f"{wb['watch']['iteration_cpu_s']:.3f} s",
                f"{wa['watch']['iteration_cpu_s']:.3f} s",
            ]
        )
    ra, rb = r.get("ray_stack", {}), b.get("ray_stack", {})
    if "ours_wall_s" in ra and "ours_wall_s" in rb:
        rows.append(
            [
                "our stacks of `ray stack`'s processes",
                _s(rb["ours_wall_s"], "s", 3),
                _s(ra["ours_wall_s"], "s", 3),
            ]
        )
    return (
        f"Before: {b.get('started')} (git {b.get('machine', {}).get('git')}), machine "
        f"{_load(b.get('load_start'))}. After: this run.\n\n"
        + _table(["measure", "before fixes", "after fixes"], rows)
    )


def _profiles(r: dict[str, Any]) -> str:
    profiles = dict(r.get("profiles", {}))
    if r.get("scale", {}).get("profile"):
        profiles["scale"] = r["scale"]["profile"]
    if not profiles:
        return "Every target was met in this run: no profile was taken."
    parts = []
    for name, p in profiles.items():
        if "top" not in p:
            continue
        rows = [
            [f"`{t['frame']}`", f"{100 * t['share']:.1f} %", f"{t['seconds']:.2f}"]
            for t in p["top"]
        ]
        how = (
            "`py-spy record --idle`, main thread (wall clock)"
            if p.get("mode", "wall") == "wall"
            else "`py-spy record --gil`, all threads (Python CPU)"
        )
        parts.append(
            f"**{name}**: `{' '.join(p['argv'])}` under {how}, "
            f"{p['wall_s_under_profiler']:.2f} s under the profiler; frames by inclusive share:\n\n"
            + _table(["frame", "share", "seconds"], rows)
        )
    return "\n\n".join(parts)


def render(
    results: dict[str, Any], baseline: dict[str, Any] | None, results_dir: Path = RESULTS_DIR
) -> str:
    from benchmarks import summary  # it formats with this module's helpers

    findings = FINDINGS.read_text() if FINDINGS.exists() else ""
    sections = [
        "# Performance\n\n"
        "Time to verdict, cost to the job and scale, measured by the benchmarks in `benchmarks/` "
        "(run them all with `python -m benchmarks.run`; see benchmarks/README.md). This file is "
        "written by that command from benchmarks/results/latest.json (the summary: from each "
        "results file it cites, with that run's machine and date); the analysis of misses and "
        "fixes comes from benchmarks/findings.md; a section it does not write (1a, 1b: hand-run "
        "A/Bs on lent machines) is kept from the file as it stood. The machine is shared with other work: the load "
        "average is recorded with every benchmark, and medians of several runs are reported.",
        "## Machine and versions\n\n" + _machine(results),
        "## Summary\n\n" + summary.section(results_dir),
        "## 1. Time to verdict\n\n" + _verdict(results),
        "## 2. Beside `ray stack`\n\n" + _ray_stack(results),
        "## 3. Scale on one node\n\n" + _scale(results),
        "## 3a. The analysis and the reports against the job's size (scaled recordings)\n\n"
        + _scaled(results_dir / SCALED)
        + _scaled_ungrouped(results_dir / SCALED_UNGROUPED, results_dir / SCALED)
        + _scaled_before(results_dir / SCALED_BEFORE),
        "## 4. Cost to the job\n\n### The pause of one py-spy dump\n\n"
        + _pause(results)
        + "\n\n### CPU of the watchdog\n\n"
        + _watchdog(results),
        "## 5. Start-up and memory\n\n" + _startup(results),
        "## 6. Misses, profiles and fixes\n\n" + findings.strip(),
        "### Before and after the fixes\n\n" + _before_after(results, baseline),
        "### Profiles of this run's misses\n\n" + _profiles(results),
    ]
    return "\n\n".join(s.strip() for s in sections) + "\n"


def _blocks(text: str) -> list[tuple[str, str]]:
    """`text` cut at its level-2 headings: (heading line, block), the first block's heading ""."""
    blocks: list[tuple[str, str]] = []
    head, lines = "", []  # type: tuple[str, list[str]]
    for line in text.splitlines():
        if line.startswith("## "):
            blocks.append((head, "\n".join(lines).strip()))
            head, lines = line.strip(), []
        lines.append(line)
    blocks.append((head, "\n".join(lines).strip()))
    return [(h, b) for h, b in blocks if b]


def keep_sections(old: str, new: str) -> str:
    """`new` (what `render` wrote) with every level-2 section of `old` (the file as it stood)
    that `render` does not write, each after the written section it followed (1a and 1b after
    1): sections measured by hand on lent machines outlive a re-run of the benchmarks."""
    written = _blocks(new)
    heads = {h for h, _ in written}
    after: dict[str, list[str]] = {}
    anchor = ""
    for head, block in _blocks(old):
        if head in heads:
            anchor = head
        elif head:
            after.setdefault(anchor, []).append(block)
    out: list[str] = []
    for head, block in written:
        out += [block, *after.pop(head, [])]
    for blocks in after.values():  # an anchor `render` no longer writes: at the end, in order
        out += blocks
    return "\n\n".join(out) + "\n"
