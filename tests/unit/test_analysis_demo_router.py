"""slime's router in the demo job (issue 24 item 3): the real sgl-router 0.3.2, forked from the
RolloutManager's constructor as slime's `_start_router` does, with a Prometheus port. Recorded:
tests/fixtures/analysis/demo/router_worker_removed.tar.gz (provenance: tests/fixtures/README.md).
The router listens on its own HTTP port (bound to the host slime gives it) and on its Prometheus
port (bound to every address), besides the Ray worker's gRPC port it inherited across the fork."""

from __future__ import annotations

from pathlib import Path

import pytest

from slime_hangdoctor.parsers.processes import SPEC as PROCESSES
from slime_hangdoctor.parsers.sglang import HTTP_ANSWERS, RouterWorkers
from slime_hangdoctor.pipeline import analyse_bundle
from slime_hangdoctor.verdict import Role

BUNDLE = (
    Path(__file__).resolve().parents[1]
    / "fixtures"
    / "analysis"
    / "demo"
    / "router_worker_removed.tar.gz"
)
ROUTER_PID = 22741  # in the recording
RM_PID = 22589
ROUTER_URL = "http://127.0.0.1:3316"  # `Router launched at 127.0.0.1:3316, Prometheus port: 4097`


@pytest.fixture(scope="module")
def analysed():  # type: ignore[no-untyped-def]
    return analyse_bundle(BUNDLE)


def test_the_recording_has_the_shape_slime_runs(analysed) -> None:  # type: ignore[no-untyped-def]
    """Guard on the fixture: the forked child kept the actor's title and listens on three ports:
    Prometheus on every address first, its own HTTP port, the inherited gRPC port."""
    procs = {p.pid: p for o in analysed.snapshot.facts(PROCESSES) for p in o.fact}
    router = procs[ROUTER_PID]
    assert router.title == "ray::RolloutManager.__init__" and router.ppid == RM_PID
    assert router.listen_addrs == ("0.0.0.0:4097", "127.0.0.1:3316", "[::]:17856")
    assert procs[RM_PID].listen_addrs == ("[::]:17856",)


def test_the_router_url_is_its_http_port_not_its_prometheus_port(analysed) -> None:  # type: ignore[no-untyped-def]
    (router,) = analysed.topology.by_role(Role.ROUTER)
    assert (router.pid, router.parent_pid) == (ROUTER_PID, RM_PID)
    assert router.engine_url == ROUTER_URL
    assert analysed.topology.routers == (ROUTER_URL,)


def test_the_doctor_read_the_routers_workers(analysed) -> None:  # type: ignore[no-untyped-def]
    """What `attach` asked the router (GET /workers, both samples): every worker removed."""
    answers = [o for o in analysed.snapshot.joined(HTTP_ANSWERS) if o.kind == "router"]
    assert [o.sample for o in answers] == [0, 1]
    for obs in answers:
        assert obs.answer.url == ROUTER_URL
        assert obs.parsed == RouterWorkers(urls=(), api="workers", workers=())


def test_the_routers_prometheus_page_is_its_own_port_not_the_inherited_grpc_port(analysed) -> None:  # type: ignore[no-untyped-def]
    """Where `attach` looks for the router's Prometheus page: its other own port, never the Ray
    worker's gRPC port (`[::]:17856`) that the fork left open in it (an HTTP/2 server: read as
    'the router does not answer')."""
    from slime_hangdoctor.collect.run import router_metrics_urls

    node = analysed.snapshot.facts(PROCESSES)[0].node_ip
    urls = router_metrics_urls(analysed.snapshot, analysed.topology, [ROUTER_URL])
    assert urls == [f"http://{node}:4097"]


def test_a_router_that_lists_no_worker_holds_the_rollout(analysed) -> None:  # type: ignore[no-untyped-def]
    """Every worker removed mid-rollout: the router's `/workers` lists none in both samples, the
    engines are up and idle, and the RolloutManager holds its connections to the router across
    both samples (its requests get 503 and are retried): the router is the culprit, the evidence
    its empty list and the held connections."""
    v = analysed.diagnosis.verdict
    assert [(c.role, c.pid) for c in v.culprits] == [(Role.ROUTER, ROUTER_PID)]
    culprit = next(f for f in v.findings if f.rule == "culprit")
    assert f"[sglang] GET {ROUTER_URL}/workers: 200, no worker" in culprit.evidence
    assert any(
        e.startswith("[sockets]") and f"(pid {RM_PID}) holds 8 connection(s)" in e
        for e in culprit.evidence
    ), culprit.evidence


def test_without_the_held_connections_the_empty_router_is_not_blamed(tmp_path: Path) -> None:
    """An empty worker list alone (a router between registrations) blames nobody: the sockets
    source is what shows the requests waiting there."""
    import tarfile

    from tests.fixtures.transforms import bundle_without_sources

    with tarfile.open(BUNDLE) as tar:
        tar.extractall(tmp_path / "src", filter="data")
    src = next(p.parent for p in (tmp_path / "src").rglob("manifest.json"))
    v = analyse_bundle(bundle_without_sources(src, tmp_path / "nosockets", frozenset({"sockets"})))
    assert not any(c.role is Role.ROUTER for c in v.diagnosis.verdict.culprits)
