"""slime's next layout (issue 35 item 4): a named, detached ServingCluster actor starts the router
and the engines (THUDM/slime@15b8e507 slime/ray/serving.py), so the router is that actor's forked
child, not the RolloutManager's. Recorded live from the demo job in that layout
(tests/fixtures/analysis/demo/serving_cluster_engine_stuck.tar.gz, provenance in
tests/fixtures/README.md): engine 1's scheduler stuck in a decode step during the rollout."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from slime_hangdoctor.bundle import open_bundle
from slime_hangdoctor.load import load_snapshot
from slime_hangdoctor.parsers.processes import SPEC as PROCESSES
from slime_hangdoctor.parsers.pyspy import ALL_STACKS
from slime_hangdoctor.parsers.ray_state import RAY_STATE
from slime_hangdoctor.parsers.sglang import HTTP_ANSWERS, HttpPeer
from slime_hangdoctor.pipeline import analyse_bundle
from slime_hangdoctor.topology import ROUTER_PARENTS, build_topology, parse_ray_title
from slime_hangdoctor.verdict import Role, Stage, Status
from tests.fixtures import transforms as tf

BUNDLE = (
    Path(__file__).resolve().parents[1]
    / "fixtures"
    / "analysis"
    / "demo"
    / "serving_cluster_engine_stuck.tar.gz"
)
SERVING_PID = 28251  # the ServingCluster actor in the recording
ROUTER_PID = 28293  # the router it forked in its constructor
ROUTER_URL = "http://127.0.0.1:3480"


@pytest.fixture(scope="module")
def analysed():  # type: ignore[no-untyped-def]
    return analyse_bundle(BUNDLE)


def test_the_recording_has_the_shape_of_slimes_next_layout(analysed) -> None:  # type: ignore[no-untyped-def]
    """Guard on the fixture: the router is the ServingCluster's child, titled by Ray as a named
    actor's constructor (`ray::<name>:ServingCluster.__init__`, kept across the fork); the
    RolloutManager has no child router."""
    procs = {p.pid: p for o in analysed.snapshot.facts(PROCESSES) for p in o.fact}
    assert procs[ROUTER_PID].ppid == SERVING_PID
    assert procs[ROUTER_PID].title == "ray::slime_serving_cluster:ServingCluster.__init__"
    assert parse_ray_title(procs[ROUTER_PID].title) == ("ServingCluster", "__init__")
    actors = {a.class_name: a for a in analysed.snapshot.joined(RAY_STATE).actors}
    assert actors["ServingCluster"].pid == SERVING_PID and "ServingCluster" in ROUTER_PARENTS
    rm = actors["RolloutManager"].pid
    assert not [p for p in procs.values() if p.ppid == rm]


def test_the_router_below_the_serving_cluster_is_the_jobs_router(analysed) -> None:  # type: ignore[no-untyped-def]
    (router,) = analysed.topology.by_role(Role.ROUTER)
    assert (router.pid, router.engine_url) == (ROUTER_PID, ROUTER_URL)
    assert analysed.topology.routers == (ROUTER_URL,)
    # the ServingCluster itself plays no role: not a rollout manager, not a member
    assert analysed.topology.member(SERVING_PID) is None


def test_without_any_stack_the_router_is_found_by_its_owner(tmp_path: Path) -> None:
    """The stacks show sgl-router's code in the router; without them (py-spy denied, the
    watchdog's stackless look) the router is found as the ServingCluster's listening child."""
    with tarfile.open(BUNDLE) as tar:
        tar.extractall(tmp_path / "src", filter="data")
    src = next(p.parent for p in (tmp_path / "src").rglob("manifest.json"))
    stackless = tf.bundle_without_sources(src, tmp_path / "stackless", frozenset({"pyspy"}))
    with open_bundle(stackless) as bundle:
        snapshot = load_snapshot(bundle)
    assert not snapshot.joined(ALL_STACKS)
    topo = build_topology(snapshot)
    assert [(m.pid, m.engine_url) for m in topo.by_role(Role.ROUTER)] == [(ROUTER_PID, ROUTER_URL)]


def test_the_verdict_names_the_stuck_engine_behind_the_serving_clusters_router(analysed) -> None:  # type: ignore[no-untyped-def]
    v = analysed.diagnosis.verdict
    assert (v.status, v.stage) == (Status.HUNG, Stage.ROLLOUT_DISPATCH), v.summary
    (engine,) = {c.engine_url for c in v.culprits}
    routed = {
        url
        for o in analysed.snapshot.joined(HTTP_ANSWERS)
        if o.kind is HttpPeer.ROUTER and o.parsed is not None
        for url in getattr(o.parsed, "urls", ())
    }
    assert engine in routed and len(routed) == 2
