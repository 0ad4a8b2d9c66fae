"""The HTML report of a 1,500-process job (issue 46 item 2; issue 41 L6): how long the page takes,
how big it is, and what dot is asked to do, against the old tree's dot on the whole job.

    python -m benchmarks.bench_html_graph [processes=1500] [rounds=3]

The job is a recorded demo diagnosis grown by `tests.fixtures.transforms.diagnosis_replicated`:
its node copied until it has `processes` process rows, the fault kept on the one recorded
process that every copy's waits point at. Three recordings: a broadcast hang with nine waits
(weight_sync_health_check_queued), the actor-queue cycle with fourteen (actor_queue_cycle) and an
engine stuck with none (rollout_engine_stuck). For each, the best of `rounds`: wall and CPU
seconds of `render_html` (dot included, with no run deadline: the most dot may take, 10 s), the
page's size, the form the graph took (SVG or list), the culprit's component and the graph drawn
(alike processes folded where the component is over dot's caps); then, once, the old
tree's way: dot on every process and wait of the job (`whole_graph`), its wall time and whether
it finished within the old 10 s; and dot on a graph at the caps (MAX_DOT_NODES, MAX_DOT_EDGES)
made from the same recording, to show what the caps let dot cost. Prints one JSON object.

The old tree's page (`page_only=1`: time and size only), run as a file with that tree first on
the path and this checkout's tests/ after it (from outside the checkout, so that its own package
is not found first):

    git archive fa9a874 slime_hangdoctor | tar -x -C /tmp/old
    cd /tmp && PYTHONPATH=/tmp/old:$REPO python $REPO/benchmarks/bench_html_graph.py page_only=1
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slime_hangdoctor.pipeline import analyse_bundle
from slime_hangdoctor.render.html import render_html
from slime_hangdoctor.verdict import Diagnosis
from tests.fixtures.transforms import diagnosis_replicated

if TYPE_CHECKING:
    from slime_hangdoctor.render.wait_graph import Graph

DEMO = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "analysis" / "demo"
RECORDINGS = ("weight_sync_health_check_queued", "actor_queue_cycle", "rollout_engine_stuck")
OLD_DOT_S = 30.0  # the old tree's dot, let run past its 10 s to see what it costs


def grown(name: str, processes: int) -> Diagnosis:
    d = analyse_bundle(DEMO / f"{name}.tar.gz").diagnosis
    return diagnosis_replicated(d, math.ceil(processes / len(d.rows)))


def _page(d: Diagnosis, rounds: int) -> dict[str, Any]:
    best_wall, best_cpu, page = float("inf"), float("inf"), ""
    for _ in range(rounds):
        w0, c0 = time.perf_counter(), time.process_time()
        page = render_html(d)
        best_wall = min(best_wall, time.perf_counter() - w0)
        best_cpu = min(best_cpu, time.process_time() - c0)
    return {
        "render_wall_s": round(best_wall, 3),
        "render_cpu_s": round(best_cpu, 3),  # dot's CPU is a child's: in the wall time only
        "page_mib": round(len(page.encode("utf-8")) / 2**20, 2),
        "graph_form": "svg" if 'id="graph-svg"' in page else "list",
    }


def _render(d: Diagnosis, rounds: int) -> dict[str, Any]:
    from slime_hangdoctor.render import graph_dot
    from slime_hangdoctor.render.wait_graph import build_graph, fold_alike

    component = build_graph(d)
    g = fold_alike(component) if graph_dot.too_big(component) else component
    return {
        **_page(d, rounds),
        "component_nodes": len(component.nodes),
        "component_waits": len(component.edges),
        "drawn_nodes": len(g.nodes),  # alike processes folded where the component is over the caps
        "drawn_waits": len(g.edges),
    }


def _dot(graph: Graph, timeout_s: float) -> dict[str, Any]:
    from slime_hangdoctor.render.graph_dot import dot_source, layout_svg

    started = time.perf_counter()
    svg, why = layout_svg(dot_source(graph), timeout_s)
    return {
        "nodes": len(graph.nodes),
        "waits": len(graph.edges),
        "dot_wall_s": round(time.perf_counter() - started, 2),
        "laid_out": svg is not None,
        "why_not": why,
    }


def at_caps(name: str) -> Graph:
    """The largest drawn graph of `name` grown copy by copy that is still within the caps."""
    from slime_hangdoctor.render import graph_dot
    from slime_hangdoctor.render.wait_graph import build_graph

    d = analyse_bundle(DEMO / f"{name}.tar.gz").diagnosis
    best = build_graph(d)
    for copies in range(2, 200):
        g = build_graph(diagnosis_replicated(d, copies))
        if graph_dot.too_big(g):
            break
        best = g
    return best


def main(processes: int = 1500, rounds: int = 3, page_only: int = 0) -> dict[str, Any]:
    """`page_only=1`: only the page's time and size (what an older tree can be asked, run as a
    file with that tree first on the path: the module docstring)."""
    out: dict[str, Any] = {
        "processes": processes,
        "cpus": os.cpu_count(),
        "load_before": [round(x, 2) for x in os.getloadavg()],
        "dot": subprocess.run(
            ["dot", "-V"], capture_output=True, text=True, check=False, timeout=10
        ).stderr.strip(),
    }
    for name in RECORDINGS:
        d = grown(name, processes)
        if page_only:
            out[name] = {"rows": len(d.rows), "waits": len(d.waits), **_page(d, rounds)}
            continue
        from slime_hangdoctor.render import graph_dot
        from slime_hangdoctor.render.wait_graph import Graph, whole_graph

        nodes, edges = whole_graph(d)
        result = {"rows": len(d.rows), "waits": len(d.waits), **_render(d, rounds)}
        result["old_whole_job_dot"] = _dot(Graph(tuple(nodes), tuple(edges)), OLD_DOT_S)
        result["dot_at_caps"] = _dot(at_caps(name), graph_dot.DOT_TIMEOUT_S)
        out[name] = result
    out["load_after"] = [round(x, 2) for x in os.getloadavg()]
    return out


if __name__ == "__main__":
    args = dict(a.split("=", 1) for a in sys.argv[1:])
    print(json.dumps(main(**{k: int(v) for k, v in args.items()}), indent=2))
