"""The wait-for graph's rules (render/wait_graph.py) on every recorded demo bundle, and dot's limits
(render/graph_dot.py: node and edge caps, what is left of the run's deadline, RLIMIT_AS) with the
real Graphviz dot (installed by apt where the test can, else skipped with the reason)."""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path

import psutil
import pytest
import typer

from slime_hangdoctor.collect.options import Deadline
from slime_hangdoctor.render import graph_dot
from slime_hangdoctor.render.graph_dot import dot_source, layout_svg
from slime_hangdoctor.render.html import render_html
from slime_hangdoctor.render.wait_graph import build_graph, fold_alike, whole_graph
from slime_hangdoctor.verdict import Diagnosis, ReportFormat, WaitKind
from tests.debian_tools import require_tool
from tests.html_dom import parse_dom
from tests.unit.demo_bundles import DEMO, diagnosed

BUNDLES = sorted(DEMO.glob("*.tar.gz"))
CYCLE = DEMO / "actor_queue_cycle.tar.gz"  # two engine actors, each queued behind the other


def _reach(start: str, edges: list[tuple[str, str]]) -> set[str]:
    out: dict[str, set[str]] = defaultdict(set)
    for a, b in edges:
        out[a].add(b)
    seen, todo = {start}, [start]
    while todo:
        for b in out[todo.pop()] - seen:
            seen.add(b)
            todo.append(b)
    return seen


@pytest.mark.parametrize("bundle", BUNDLES, ids=lambda p: p.name.removesuffix(".tar.gz"))
def test_the_drawing_is_the_culprits_component_with_idle_processes_folded(bundle: Path) -> None:
    d = diagnosed(bundle)
    nodes, edges = whole_graph(d)
    g = build_graph(d)
    drawn = {n.id for n in g.nodes if not n.folded}
    linked = {e.source for e in edges} | {e.target for e in edges}
    # every process is drawn, folded, or counted as left out; every wait drawn or counted
    folded = sum(len(n.folded) for n in g.nodes)
    assert len(drawn) + folded + g.left_out_processes == len(nodes)
    assert len(g.edges) + g.left_out_waits == len(edges) == len(d.waits)
    assert {e.number for e in g.edges} <= set(range(1, len(d.waits) + 1))
    # a drawn wait joins two drawn processes; a fold stands for processes no wait touches
    assert all(e.source in drawn and e.target in drawn for e in g.edges)
    by_label = {n.label: n for n in nodes}
    assert all(by_label[m].id not in linked for n in g.nodes for m in n.folded)
    assert all(n.label == f"{len(n.folded)} idle" for n in g.nodes if len(n.folded) > 1)
    # the culprits are drawn; a drawn process is a culprit or linked to one by the drawn waits
    culprits = {n.id for n in nodes if n.culprit}
    assert culprits <= drawn
    pairs = [(e.source, e.target) for e in g.edges] + [(e.target, e.source) for e in g.edges]
    near = set().union(*(_reach(c, pairs) for c in culprits)) if culprits else set()
    if any(e.source in near for e in edges):  # a wait reaches a culprit: its component only
        assert drawn == near
        assert g.left_out_waits == sum(1 for e in edges if e.source not in near)
    else:  # no wait reaches one: the culprits and every wait
        assert drawn == culprits | linked


@pytest.mark.parametrize("bundle", BUNDLES, ids=lambda p: p.name.removesuffix(".tar.gz"))
def test_a_wait_is_marked_as_part_of_a_cycle_exactly_when_it_leads_back_to_itself(
    bundle: Path,
) -> None:
    g = build_graph(diagnosed(bundle))
    pairs = [(e.source, e.target) for e in g.edges]
    for e in g.edges:
        assert (e.cycle is not None) == (e.source in _reach(e.target, pairs)), e
        if e.cycle is not None:
            assert e.number in g.cycles[e.cycle].numbers
    assert sum(len(c.numbers) for c in g.cycles) == sum(1 for e in g.edges if e.cycle is not None)


def test_the_actor_queue_cycle_is_drawn_and_captioned_as_a_cycle() -> None:
    """Demo fault actor_queue_cycle: each engine actor's running init_weights_update_group waits
    behind the other's queued one. Its two queue waits are one cycle, captioned, on the edges."""
    d = diagnosed(CYCLE)
    g = build_graph(d)
    assert len(g.cycles) == 1
    queued = {
        i
        for i, w in enumerate(d.waits, 1)
        if w.kind is WaitKind.QUEUE
        and w.waiter.label.startswith("engine actor")
        and w.waited_for.label.startswith("engine actor")
    }
    assert len(queued) == 2 and set(g.cycles[0].numbers) == queued
    dom = parse_dom(render_html(d, layout=lambda _s, _t: (None, "no layout in this test")))
    caption = dom.by_id("cycle-1")
    assert caption is not None and "cycle of 2 waits" in caption.text
    actors = {d.waits[i - 1].waiter.label for i in queued}
    assert len(actors) == 2 and all(label in caption.text for label in actors)
    for number in queued:  # the list form and the waits' table say so too
        item = dom.by_id(f"list-w{number}")
        row = dom.by_id(f"wait-{number}")
        assert item is not None and "cycle" in item.classes and "cycle 1" in item.text
        assert row is not None and "cycle" in row.classes
    source = dot_source(g)
    cyclic = [line for line in source.splitlines() if " cycle" in line and "->" in line]
    assert sorted(int(line.split('id="w')[1].split('"')[0]) for line in cyclic) == sorted(queued)


# --------------------------------------------------------------------------- dot's limits


def test_a_graph_over_the_cap_is_shown_as_a_list_without_running_dot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The caps (MAX_DOT_NODES, MAX_DOT_EDGES) lowered below the recorded cycle's graph, even with
    alike processes folded: dot is never asked, the page says why and lists every drawn wait."""
    d = diagnosed(CYCLE)
    g = build_graph(d)
    folded = fold_alike(g)
    assert len(folded.nodes) < len(g.nodes)  # its two engines are alike
    asked: list[str] = []

    def layout(source: str, seconds: float) -> tuple[str | None, str]:
        asked.append(source)
        return None, "asked"

    monkeypatch.setattr(graph_dot, "MAX_DOT_NODES", len(folded.nodes) - 1)
    dom = parse_dom(render_html(d, layout=layout))
    note = dom.by_id("graph-note")
    assert not asked and note is not None
    assert f"{len(folded.nodes)} nodes and {len(folded.edges)} waits" in note.text
    listing = dom.by_id("graph-list")
    assert listing is not None and len(listing.find_all("li", "wait")) == len(folded.edges)
    monkeypatch.setattr(graph_dot, "MAX_DOT_NODES", len(folded.nodes))
    monkeypatch.setattr(graph_dot, "MAX_DOT_EDGES", len(folded.edges) - 1)
    render_html(d, layout=layout)
    assert not asked
    monkeypatch.setattr(graph_dot, "MAX_DOT_EDGES", len(folded.edges))
    render_html(d, layout=layout)  # within the caps once folded: dot draws the folded graph
    assert asked == [dot_source(folded)]
    monkeypatch.setattr(graph_dot, "MAX_DOT_NODES", len(g.nodes))
    monkeypatch.setattr(graph_dot, "MAX_DOT_EDGES", len(g.edges))
    render_html(d, layout=layout)  # within the caps as it is: nothing folded
    assert asked[1:] == [dot_source(g)]


def _dot_children() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True) if p.name() == "dot"]


def test_dot_past_the_time_left_is_stopped_and_the_page_shows_the_list(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The CLI's `_emit` with the run's deadline spent: dot gets what is left (here MIN_DOT_S,
    lowered to 1 ms so that the real dot is sure to be slower), is killed, and the report
    written still has the graph, as a list, with a note saying why."""
    require_tool("dot", "graphviz")
    from slime_hangdoctor import cli

    d = diagnosed(CYCLE)
    assert layout_svg(dot_source(build_graph(d)))[0] is not None  # the control: dot draws it
    monkeypatch.setattr(graph_dot, "MIN_DOT_S", 0.001)
    out = tmp_path / "report.html"
    started = time.monotonic()
    with pytest.raises(typer.Exit):
        cli._emit(d, ReportFormat.HTML, to=out, deadline=Deadline(0.0))
    assert time.monotonic() - started < graph_dot.DOT_TIMEOUT_S
    dom = parse_dom(out.read_text())
    note = dom.by_id("graph-note")
    assert note is not None and dom.by_id("graph-svg") is None
    assert "did not finish within 0.0 s" in note.text and "--timeout" in note.text, note.text
    listing = dom.by_id("graph-list")
    assert listing is not None and len(listing.find_all("li", "wait")) == len(d.waits)
    assert not _dot_children()  # killed and reaped


def test_dot_runs_under_an_address_space_limit() -> None:
    """RLIMIT_AS set on the child: under 1 MiB of address space dot cannot lay out a graph and
    the page gets the list; under the default it can."""
    require_tool("dot", "graphviz")
    source = dot_source(build_graph(diagnosed(CYCLE)))
    svg, why = layout_svg(source, 30.0, memory_bytes=2**20)
    assert svg is None and "failed" in why, why
    svg, why = layout_svg(source, 30.0)
    assert svg is not None and why == ""
    assert not _dot_children()


def test_dot_is_given_what_is_left_of_the_run_at_least_a_second_at_most_ten() -> None:
    assert graph_dot.dot_seconds(None) == graph_dot.DOT_TIMEOUT_S == 10.0
    assert graph_dot.dot_seconds(0.0) == graph_dot.MIN_DOT_S == 1.0
    assert graph_dot.dot_seconds(3.5) == 3.5
    assert graph_dot.dot_seconds(60.0) == 10.0


# --------------------------------------------------------------------------- a 1,500-process job


def _grown(name: str) -> tuple[Diagnosis, Diagnosis]:
    from tests.fixtures.transforms import diagnosis_replicated

    recorded = diagnosed(DEMO / f"{name}.tar.gz")
    return recorded, diagnosis_replicated(recorded, -(-1500 // len(recorded.rows)))


@pytest.mark.parametrize("name", ["weight_sync_health_check_queued", "actor_queue_cycle"])
def test_alike_processes_fold_without_losing_a_wait_or_a_culprit(name: str) -> None:
    recorded, d = _grown(name)
    assert len(d.rows) >= 1500 and not any(r.culprit for r in d.rows[len(recorded.rows) :])
    g = build_graph(d)
    f = fold_alike(g)
    assert len(f.nodes) < len(g.nodes) and not graph_dot.too_big(f)
    assert sum(e.alike for e in f.edges) == len(g.edges)  # every drawn wait, counted
    assert {n.id for n in f.nodes if n.culprit} == {n.id for n in g.nodes if n.culprit}
    assert f.alike_folded == sum(1 for n in g.nodes) - sum(
        1 for n in f.nodes if "alike" not in n.label and not n.id.startswith("a")
    )
    # the folded graph is the grown one's quotient: the recording's own graph has its shape
    small = fold_alike(build_graph(recorded))
    assert len(f.nodes) >= len(small.nodes)
    assert {e.wait.kind for e in f.edges} == {e.wait.kind for e in g.edges}
    assert bool(f.cycles) == bool(build_graph(recorded).cycles)


@pytest.mark.parametrize("name", ["weight_sync_health_check_queued", "actor_queue_cycle"])
def test_a_1500_process_job_gets_its_graph_drawn_folded_in_a_page_under_2_mib(name: str) -> None:
    """A recorded hang grown to 1,500 processes (transforms.diagnosis_replicated: every copy's
    waits point at the one faulty process): the culprit's component is over dot's caps as it is;
    alike processes folded, dot draws it (real dot, where installed); the page stays under 2 MiB
    with the culprit marked. What it costs is benchmarks/bench_html_graph.py's
    (docs/performance.md)."""
    require_tool("dot", "graphviz")
    _recorded, d = _grown(name)
    g = build_graph(d)
    assert graph_dot.too_big(g)
    page = render_html(d)
    assert len(page.encode("utf-8")) < 2 * 2**20
    dom = parse_dom(page)
    drawn = dom.by_id("graph-svg")
    assert drawn is not None and dom.by_id("graph-list") is None
    culprits = [n for n in g.nodes if n.culprit]
    marked = [e for e in drawn.find_all("g", "culprit") if "node" in e.classes]
    assert sorted(e.attrs["id"] for e in marked) == sorted(n.id for n in culprits)
    assert "processes are drawn folded with alike ones" in dom.text
