"""An open connection is not a request in flight (issue 27), on recorded bundles of the real
sgl-router 0.3.2 forked as slime forks it, in front of two SGLang stand-ins
(tests/fixtures/analysis/router, provenance in tests/fixtures/README.md), and on the recorded demo
bundle of a paused engine: a held connection counts only with a named kind of evidence of a request
on it, and an idle pool is shown as such, never a culprit."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from slime_hangdoctor.analysis.network import (
    HeldRequests,
    InFlightKind,
    held_requests,
    idle_pools,
    is_router,
    peer_map,
)
from slime_hangdoctor.analysis.parts.rollout.lost_requests import Holder, where_requests_are
from slime_hangdoctor.analysis.readers.sglang_http import EngineRead, read_engines
from slime_hangdoctor.analysis.world import World, build_world
from slime_hangdoctor.bundle import open_bundle
from slime_hangdoctor.collect.run import router_metrics_urls
from slime_hangdoctor.errors import ParseError
from slime_hangdoctor.load import load_snapshot
from slime_hangdoctor.parsers.pyspy import PYSPY
from slime_hangdoctor.parsers.sglang import (
    HTTP_ANSWERS,
    SGLANG,
    RouterMetrics,
    RouterWorkers,
    parse_router_metrics,
)
from slime_hangdoctor.parsers.sglang import ROUTER as ROUTER_SOURCE
from slime_hangdoctor.topology import build_topology
from slime_hangdoctor.verdict import Role, Stage, Status
from tests.fixtures import transforms as tf
from tests.unit.demo_bundles import diagnosed, unpacked

ROUTER = Path(__file__).resolve().parents[1] / "fixtures" / "analysis" / "router"


def _router_bundle(name: str, dest: Path) -> Path:
    with tarfile.open(ROUTER / f"{name}.tar.gz") as tar:
        tar.extractall(dest, filter="data")
    return next(p.parent for p in dest.rglob("manifest.json"))


def _world(path: Path) -> World:
    with open_bundle(path) as bundle:
        snapshot = load_snapshot(bundle)
    return build_world(snapshot, build_topology(snapshot))


def _held(path: Path) -> tuple[tuple[HeldRequests, ...], tuple[HeldRequests, ...]]:
    world = _world(path)
    engines = read_engines(world)
    return held_requests(world, engines), idle_pools(world, engines)


def test_the_routers_idle_pool_blames_no_engine(tmp_path: Path) -> None:
    """The router keeps the connections of its registration probes: 2 to each engine across both
    samples, nothing in flight. Before issue 27 both engines were culprits on them."""
    root = _router_bundle("idle_behind_router", tmp_path)
    held, idle = _held(root)
    assert held == ()
    assert len(idle) == 2 and all(h.persistent and h.connections == 2 for h in idle)
    for h in idle:
        assert [is_router(p) for p, _ in h.callers] == [True]
        assert h.in_flight == ()
        assert "the router counts 0 in flight to it (GET /workers load)" in h.idle
        assert "its HTTP layer counts 0 request(s) in flight" in h.idle
        assert "empty socket queues" in h.idle and "no caller awaits an answer" in h.idle
    v = diagnosed(root).verdict
    assert v.culprits == (), v.summary
    assert all(f.rule != "requests-held-outside-scheduler" for f in v.findings)
    conns = next(f for f in v.findings if f.rule == "connections")
    assert sum("idle pooled connection(s)" in line for line in conns.evidence) == 2, conns


def test_requests_held_behind_the_router_are_named_with_their_evidence(tmp_path: Path) -> None:
    """The engine that served a first request paused, four `/generate` sent through the router
    after it: the engine's HTTP layer and the router (its `/workers` and its Prometheus page)
    count them, the RolloutManager waits in its method, and the chain names the RolloutManager,
    the router and the engine."""
    root = _router_bundle("held_behind_router", tmp_path)
    (h,), _ = _held(root)
    assert set(h.kinds) == {
        InFlightKind.ENGINE_HTTP,
        InFlightKind.ROUTER,
        InFlightKind.CALLER_AWAITS,
    }, h.in_flight
    (router,) = (f.text for f in h.in_flight if f.kind is InFlightKind.ROUTER)
    assert "4 (GET /workers load)" in router and "4 (smg_worker_requests_active" in router
    assert [is_router(p) for p, _ in h.callers] == [True, False]  # 4 routed, 1 of its own pool
    (chain,) = h.chain
    assert chain.startswith("rollout manager (pid ") and chain.endswith(f"engine {h.engine.url}")
    assert " -> router (pid " in chain
    v = diagnosed(root).verdict
    assert (v.status, v.stage) == (Status.HUNG, Stage.ROLLOUT_DISPATCH), v.summary
    (top,) = v.culprits
    assert top.role is Role.SGLANG_ENGINE and top.engine_url == h.engine.url
    finding = next(f for f in v.findings if f.rule == "requests-held-outside-scheduler")
    assert any(line.startswith("[engine_http] ") for line in finding.evidence), finding
    assert any(line.startswith("[router] ") for line in finding.evidence), finding
    assert any(line.startswith("chain: rollout manager") for line in finding.evidence), finding


def test_a_waiting_caller_s_pooled_connection_to_an_idle_engine_is_no_request(
    tmp_path: Path,
) -> None:
    """The RolloutManager waits for its requests (at the paused engine, through the router) and
    its aiohttp pool keeps a connection to the other engine from its `/abort_request` round: that
    engine's HTTP layer counts no request, so the wait is not on it."""
    root = _router_bundle("held_behind_router", tmp_path)
    (h,), (pool,) = _held(root)
    assert pool.engine.url != h.engine.url and pool.in_flight == ()
    assert h.singled_out  # the other engine's connections are a pool: it holds no request
    assert [p.role for p, _ in pool.callers] == [Role.ROLLOUT_MANAGER]
    assert "rollout manager waits, but not on this engine (its HTTP layer)" in pool.idle
    assert "its HTTP layer counts 0 request(s) in flight" in pool.idle


def test_without_the_counts_and_the_stacks_the_held_connections_are_an_idle_pool(
    tmp_path: Path,
) -> None:
    """The same recording without the router's answers and the stacks, then without the engines'
    `/metrics` too: the router and the RolloutManager hold the same connections, and nothing
    shows a request on them: no engine is blamed on connections alone."""
    root = _router_bundle("held_behind_router", tmp_path / "src")
    gone = frozenset({ROUTER_SOURCE, PYSPY})
    without = tf.bundle_without_sources(root, tmp_path / "without", gone)
    (h,), _ = _held(without)
    assert h.kinds == (InFlightKind.ENGINE_HTTP,)
    pages = tuple(
        r["target"]
        for r in json.loads((without / "manifest.json").read_text())["probes"]
        if r["source"] == SGLANG and r["target"].endswith("_metrics")
    )
    assert len(pages) == 4  # two engines, two samples
    metrics = tf.bundle_without_targets(without, tmp_path / "neither", SGLANG, pages)
    held, idle = _held(metrics)
    assert held == () and len(idle) == 2
    v = diagnosed(metrics).verdict
    assert all(c.role is not Role.SGLANG_ENGINE for c in v.culprits), v.summary


def test_the_paused_demo_engine_is_named_by_its_callers_wait(tmp_path: Path) -> None:
    """engine_paused_by_update (recorded before the stand-in had the HTTP middleware's series,
    no router): the RolloutManager's own thread waits in its rollout at both samples. Without its
    stacks nothing shows a request on its connections, and no engine is named from them."""
    root = unpacked("engine_paused_by_update", tmp_path / "src")
    (h,) = held_requests(*_engines(root))
    assert h.kinds == (InFlightKind.CALLER_AWAITS,)
    assert "rollout manager" in h.in_flight[0].text and Stage.ROLLOUT_DISPATCH.label in h.in_flight[0].text
    assert h.unread_bytes == 0  # the 119 bytes at sample 1 are a probe of the doctor's own
    stackless = tf.bundle_without_sources(
        root, tmp_path / "stackless", frozenset({PYSPY})
    )
    world, engines = _engines(stackless)
    assert held_requests(world, engines) == ()
    (pool,) = idle_pools(world, engines)
    assert pool.engine.url == h.engine.url
    v = diagnosed(stackless).verdict
    assert all(c.role is not Role.SGLANG_ENGINE for c in v.culprits), v.summary


def _engines(path: Path) -> tuple[World, tuple[EngineRead, ...]]:
    world = _world(path)
    return world, read_engines(world)


def test_the_routers_prometheus_page_is_found_among_its_ports_and_read(tmp_path: Path) -> None:
    """The collector found the router's Prometheus port among the router process's listening
    ports (its HTTP port answers 404 there) and read `smg_worker_requests_active` per worker."""
    root = _router_bundle("held_behind_router", tmp_path)
    with open_bundle(root) as bundle:
        snapshot = load_snapshot(bundle)
    topology = build_topology(snapshot)
    routers = [o.answer.url for o in snapshot.joined(HTTP_ANSWERS) if isinstance(o.parsed, RouterWorkers)]
    (url,) = router_metrics_urls(snapshot, topology, sorted(set(routers)))
    # a --router-url with a bad port leaves the rest as it is (it fails on its own probe)
    assert router_metrics_urls(snapshot, topology, [*routers, "http://h:99999"]) == [url]
    pages = [o for o in snapshot.joined(HTTP_ANSWERS) if isinstance(o.parsed, RouterMetrics)]
    assert len(pages) == 2 and {o.answer.url for o in pages} == {url}
    (held,) = held_requests(*_engines(root))
    assert [p.parsed.requests_active for p in pages if isinstance(p.parsed, RouterMetrics)] == [
        {held.engine.url: 4.0}
    ] * 2


def test_an_engine_page_is_not_a_routers(tmp_path: Path) -> None:
    root = _router_bundle("held_behind_router", tmp_path)
    page = next(root.rglob("raw/router/**/*_metrics.s0.txt"))
    engine_page = next(p for p in root.rglob("raw/sglang/**/*_metrics.s0.txt"))
    assert parse_router_metrics(page.read_bytes()).requests_active
    with pytest.raises(ParseError, match="no smg_worker_requests_active"):
        parse_router_metrics(engine_page.read_bytes())


def test_bytes_waiting_in_the_held_sockets_at_both_samples_are_a_request(tmp_path: Path) -> None:
    """The idle router bundle with one pooled connection's queue set (`transforms.sockets_with_queue`,
    119 bytes: the size of the request waiting unread in engine_paused_by_update's server): unread
    by the engine's server, or unacknowledged at the router, at both samples it is a request in
    flight; at one sample only it is not."""
    root = _router_bundle("idle_behind_router", tmp_path / "src")
    world = _world(root)
    router = next(p for p in world.procs if is_router(p))
    engine = sorted(e.url for e in read_engines(world))[0]
    port = int(engine.rsplit(":", 1)[1])
    conn = next(c for c in router.conns[-1][1] if c.socket.remote_port == port)
    mine = conn.socket.local_port

    unread = tf.sockets_with_queue(root, tmp_path / "unread", (port, mine), rx=119)
    (h,) = held_requests(*_engines(unread))
    assert (h.engine.url, h.kinds, h.unread_bytes) == (engine, (InFlightKind.SOCKET_QUEUES,), 119)
    assert "119 bytes received not read" in h.in_flight[0].text
    assert [c.engine_url for c in diagnosed(unread).verdict.culprits] == [engine]

    unacked = tf.sockets_with_queue(root, tmp_path / "unacked", (mine, port), tx=119)
    (h,) = held_requests(*_engines(unacked))
    assert "119 bytes sent and not acknowledged" in h.in_flight[0].text

    once = tf.sockets_with_queue(root, tmp_path / "once", (port, mine), rx=119, samples=(1,))
    assert held_requests(*_engines(once)) == ()


def test_a_rollout_awaiting_a_leaked_slot_holds_only_an_idle_pool(tmp_path: Path) -> None:
    """The RolloutManager awaits a semaphore slot nobody releases after slime's abort round: its
    aiohttp pool keeps one connection to each engine, the router's keeps two, no request is
    anywhere. No engine holds the requests, and the RolloutManager's connections are named as an
    idle pool, not as where the requests are (before issue 27: `Holder.ENGINE` on them)."""
    root = _router_bundle("awaits_behind_router", tmp_path)
    world, engines = _engines(root)
    assert held_requests(world, engines) == ()
    pools = idle_pools(world, engines)
    assert len(pools) == 2
    for pool in pools:
        assert {p.role for p, _ in pool.callers} == {Role.ROLLOUT_MANAGER, Role.ROUTER}
        assert "rollout manager waits, but not on this engine (its HTTP layer)" in pool.idle
    (rm,) = world.by_role(Role.ROLLOUT_MANAGER)
    where = where_requests_are(world, engines, rm)
    assert where.holder is Holder.UNKNOWN, where
    assert any("idle keep-alive pool" in line for line in where.why), where.why
    v = diagnosed(root).verdict
    assert v.culprits == (), v.summary


def test_the_peer_map_and_held_connections_are_kept_per_world_and_engines(tmp_path: Path) -> None:
    """Built once per world and engines (analysis/network.py `_memo`, issue 46): asked first with
    no engine known, then with the engines read, each answer is its own; asked again with an
    equal tuple, the same objects come back."""
    root = _router_bundle("held_behind_router", tmp_path)
    world = _world(root)
    engines = read_engines(world)
    assert held_requests(world, ()) == () and idle_pools(world, ()) == ()
    (held,) = held_requests(world, engines)
    assert held.engine.url in {e.url for e in engines}
    again = (*engines,)
    assert again is not engines and held_requests(world, again) == (held,)
    assert peer_map(world, again) is peer_map(world, engines)
    assert peer_map(world, ()) is not peer_map(world, engines)
