"""Each evidence source's table lives once, beside its parser; what collects and what loads are
derived from it, so nothing collected can go unparsed (issue 13, item 1)."""

from __future__ import annotations

import importlib
import pkgutil

from slime_hangdoctor import load
from slime_hangdoctor.analysis.source_analysis import source_analyses
from slime_hangdoctor.collect import dashboard
from slime_hangdoctor.collect import sglang as collect_sglang
from slime_hangdoctor.collect.node import node_probes, window_probes
from slime_hangdoctor.collect.options import CollectOptions
from slime_hangdoctor.parsers import ray_state
from slime_hangdoctor.parsers import sglang as parse_sglang
from slime_hangdoctor.sources import ENTRIES, PARTS, SPECS


def test_every_source_is_loaded_by_its_spec() -> None:
    """One spec a source, and every spec parses its records itself (`parse`, or `parse_any` for
    a source whose failed answers are evidence): the loader has no loader of its own."""
    names = [spec.name for spec in SPECS]
    assert len(names) == len(set(names)), "one spec a source"
    for spec in SPECS:
        assert (spec.parse is None) != (spec.parse_any is None), spec
        assert spec.max_bytes > 0
    assert not [name for name in vars(load) if name.startswith("_load_")]


def test_each_layer_finds_the_part_of_a_spec_it_runs() -> None:
    """A spec names its node probe and its part of the diagnosis by module; each resolves, in its
    own layer, to the entry point that layer calls, and a switch is a CollectOptions flag."""
    probes = dict(node_probes())
    analyses = source_analyses()
    for spec in SPECS:
        if spec.node_probe is not None:
            assert spec.node_probe.startswith("slime_hangdoctor.collect."), spec
            assert probes[spec.name] is importlib.import_module(spec.node_probe).NODE_PROBE
        if spec.analysis is not None:
            assert spec.analysis.startswith(PARTS), spec
            assert importlib.import_module(spec.analysis).ANALYSIS in analyses
        if spec.window_probe is not None:
            assert spec.window_probe.startswith("slime_hangdoctor.collect."), spec
            module = importlib.import_module(spec.window_probe)
            assert dict(window_probes())[spec.name] is module.WINDOW_PROBE
        if spec.switch is not None:
            assert isinstance(getattr(CollectOptions(), spec.switch), bool), spec


def test_one_list_reaches_every_part_once_in_its_order() -> None:
    """sources.ENTRIES is the one way in: every module of analysis/parts/ is a part, reached once,
    at its entry's place (a spec's part at the spec's), and named as its module is."""
    from slime_hangdoctor.analysis import parts as pkg

    modules = {m.name for m in pkgutil.iter_modules(pkg.__path__)}
    expected = []
    for entry in ENTRIES:
        if entry.startswith(PARTS):
            expected.append(entry)
        else:
            module, _, attribute = entry.partition(":")
            spec = getattr(importlib.import_module(module), attribute)
            if spec.analysis is not None:
                expected.append(spec.analysis)
    assert [PARTS + a.name for a in source_analyses()] == expected
    assert (
        len(expected) == len(set(expected)) and {m.rsplit(".", 1)[1] for m in expected} == modules
    )
    assert sum(a.fallback for a in source_analyses()) >= 1


def test_node_probes_read_the_processes_before_py_spy_stops_them() -> None:
    """The node probes run in the sources' order, the one that attaches to the processes (py-spy)
    after the procfs reads (sockets, kernel: a process's state and wchan, not its tracing stop)."""
    names = [name for name, _ in node_probes()]
    assert names == [s.name for s in SPECS if s.node_probe and not s.attaches] + [
        s.name for s in SPECS if s.node_probe and s.attaches
    ]
    assert names[-1] == "pyspy" and {"sockets", "kernel"} <= set(names[:-1])


def test_every_parsed_dashboard_answer_is_joined() -> None:
    tables = (*ray_state.STATE_ENDPOINTS, ray_state.TASK_HISTORY)
    parsed = {e.target for e in tables if e.parse is not None}
    assert parsed == set(ray_state.JOINED_BY)


def test_the_dashboard_collector_asks_the_parsers_table() -> None:
    assert dashboard.STATE_ENDPOINTS is ray_state.STATE_ENDPOINTS
    targets = [e.target for e in ray_state.STATE_ENDPOINTS]
    assert len(targets) == len(set(targets)), "one artefact name per endpoint"


def test_a_stored_dashboard_answer_finds_its_entry() -> None:
    for e in ray_state.STATE_ENDPOINTS:
        assert ray_state.endpoint_of(e.path, e.target) is e
    # older bundles kept the query string in meta["endpoint"]
    actors = ray_state.endpoint_of("/api/v0/actors?detail=1", "actors")
    assert actors is not None and actors.target == "actors"
    assert ray_state.endpoint_of("/api/unknown", "x") is None
    # the per-job task history: one entry for every job's answer
    history = ray_state.endpoint_of("/api/v0/tasks", "tasks_job_02000000")
    assert history is ray_state.TASK_HISTORY


def test_every_sglang_path_collected_is_parsed_by_the_loader() -> None:
    endpoints = (*collect_sglang.ENGINE_ENDPOINTS, *collect_sglang.ROUTER_ENDPOINTS)
    collected = {p for e in endpoints if e.check is not None for p in e.paths}
    assert collected == set(parse_sglang.PARSER_BY_PATH)
    for e in endpoints:
        assert e.check is parse_sglang.PARSER_BY_PATH.get(e.paths[0])
    # status-only probes (/ready, /ping): their status is the answer, kept but never parsed
    status_only = {p for e in parse_sglang.ENGINE_ENDPOINTS if e.parse is None for p in e.paths}
    assert status_only == {"/ready", "/ping"}
    assert {p for e in endpoints if e.check is None for p in e.paths} == status_only
    # the opt-in health probes are stored but never parsed (their status is the answer)
    assert collect_sglang.HEALTH.check is None and collect_sglang.HEALTH_GENERATE.check is None


def test_one_list_of_sglang_counters_that_mean_work() -> None:
    from slime_hangdoctor.parsers.sglang import SglangMetrics

    fields = set(SglangMetrics.__dataclass_fields__)
    assert {name for name, _ in parse_sglang.WORK_COUNTERS} <= fields
