"""The object-store wait (ray-project/ray#62093) on the recorded demo bundle of fault
`rollout_data_plasma_full` (tests/fixtures/analysis/demo/, provenance in tests/fixtures/README.md):
a Ray task of the RolloutManager's rollout-data conversion never gets its lease because the
arguments that a running task pins fill Ray's share of a 128 MiB object store."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from slime_hangdoctor.analysis.parts.plasma import ARGS_MEMORY_FRACTION, LEASE_WAIT_STATES
from slime_hangdoctor.bundle import open_bundle
from slime_hangdoctor.load import load_snapshot
from slime_hangdoctor.parsers.ray_state import RAY_STATE
from slime_hangdoctor.verdict import Role, Stage
from tests.fixtures import transforms as tf
from tests.unit.demo_bundles import DEMO, diagnosed, unpacked

NAME = "rollout_data_plasma_full"
MIB = 1024 * 1024


def test_the_raylet_reports_the_store_the_head_was_given(tmp_path: Path) -> None:
    # GIVEN the node summary the dashboard answered (the head ran with --object-store-memory 128 MiB)
    with open_bundle(unpacked(NAME, tmp_path)) as bundle:
        snap = load_snapshot(bundle)
    # THEN the parsed store is that one, used past Ray's share for the arguments of running tasks
    (store,) = snap.joined(RAY_STATE).object_stores
    assert store.capacity_bytes == 128 * MIB
    assert store.used_fraction >= ARGS_MEMORY_FRACTION
    assert store.node_ip == "192.0.2.2"
    waiting = {
        t.name
        for p in snap.joined(RAY_STATE).task_pages
        for t in p.tasks
        if t.state in LEASE_WAIT_STATES
    }
    assert waiting == {"pack_shard"}


def test_the_task_that_cannot_start_names_the_call_that_waits(tmp_path: Path) -> None:
    v = diagnosed(unpacked(NAME, tmp_path)).verdict
    assert v.stage is Stage.ROLLOUT_DISPATCH
    (culprit,) = v.culprits
    assert culprit.role is Role.ROLLOUT_MANAGER
    assert "task pack_shard" in culprit.why and "PENDING_NODE_ASSIGNMENT" in culprit.why
    assert "RolloutManager.generate waits for it" in culprit.why
    finding = next(f for f in v.findings if f.rule == "ray_plasma.args_wait")
    assert "96 MiB of 128 MiB used (75%)" in finding.message
    assert any(e.startswith("pack_rollout_batch ") and "RUNNING" in e for e in finding.evidence)
    assert any("ray memory --stats-only" in e for e in finding.evidence)
    assert any("ray status" in e for e in finding.evidence)


@pytest.mark.parametrize("targets", [("node_summary",), ("tasks_unfinished",)])
def test_without_the_store_or_the_waiting_task_no_one_is_named(
    tmp_path: Path, targets: tuple[str, ...]
) -> None:
    # GIVEN the bundle without the raylets' store report, or without the unfinished tasks
    src = unpacked(NAME, tmp_path / "src")
    without = tf.bundle_without_targets(src, tmp_path / "without", "ray_dashboard", targets)
    v = diagnosed(without).verdict
    # THEN nothing claims the object store, and the RolloutManager's ray.get names no culprit
    assert "ray_plasma.args_wait" not in {f.rule for f in v.findings}
    assert v.culprits == ()


# The same fault attached 2.5 s after it armed, on a head started 13 s before (the first live run of
# tests/integration/test_attach_demo.py): the dashboard had not yet read the raylet's store (it
# does every 15 s), so its node summary carries zeros and no store stats; the cluster status's GCS
# resource view (usageByNode) had the store's fill already.
BEFORE_READ = DEMO.parent / "demo2" / f"{NAME}.tar.gz"


def _before_read(tmp_path: Path) -> Path:
    with tarfile.open(BEFORE_READ) as tar:
        tar.extractall(tmp_path, filter="data")
    return next(p.parent for p in tmp_path.rglob("manifest.json"))


def test_a_store_the_node_summary_has_not_read_is_read_in_the_gcs_view(tmp_path: Path) -> None:
    """CI's flaky culprit (the live test attached before the dashboard's 15 s refresh): the fill
    the GCS's resource view gives decides where the node summary has none."""
    path = _before_read(tmp_path)
    with open_bundle(path) as bundle:
        snap = load_snapshot(bundle)
    # GIVEN the task waiting in both samples, and a node summary without store readings
    waiting = {
        t.name
        for p in snap.joined(RAY_STATE).task_pages
        for t in p.tasks
        if t.state in LEASE_WAIT_STATES
    }
    assert waiting == {"pack_shard"}
    # THEN the store is the GCS view's, named by the nodes answer's address, and it is claimed
    (store,) = snap.joined(RAY_STATE).object_stores
    assert (store.node_ip, store.capacity_bytes) == ("192.0.2.2", 128 * MIB)
    assert store.used_fraction >= ARGS_MEMORY_FRACTION
    v = diagnosed(path).verdict
    assert [(c.role, c.pid) for c in v.culprits] == [(Role.ROLLOUT_MANAGER, 3008)], v.summary
    finding = next(f for f in v.findings if f.rule == "ray_plasma.args_wait")
    assert "96 MiB of 128 MiB used (75%)" in finding.message, finding.message


def test_without_any_store_reading_nothing_claims_the_store(tmp_path: Path) -> None:
    src = _before_read(tmp_path / "src")
    without = tf.bundle_without_targets(
        src, tmp_path / "without", "ray_dashboard", ("cluster_status",)
    )
    with open_bundle(without) as bundle:
        snap = load_snapshot(bundle)
    # THEN no store is parsed (not an empty one), and nothing claims the object store
    assert snap.joined(RAY_STATE).object_stores == ()
    v = diagnosed(without).verdict
    assert "ray_plasma.args_wait" not in {f.rule for f in v.findings}


# The same fault recorded by the second live run, one node-stats refresh after it armed: by then
# the autoscaler's report lists the waiting task's demand ({"CPU": 0.01}), which the free CPUs
# cover, and the store reads 96 of 128 MiB.
WITH_DEMAND = DEMO.parent / "demo2" / f"{NAME}_demand.tar.gz"


def test_a_demand_that_the_free_resources_cover_is_no_resource_wait(tmp_path: Path) -> None:
    with tarfile.open(WITH_DEMAND) as tar:
        tar.extractall(tmp_path, filter="data")
    path = next(p.parent for p in tmp_path.rglob("manifest.json"))
    with open_bundle(path) as bundle:
        snap = load_snapshot(bundle)
    # GIVEN the waiting task's own demand in the cluster status, and CPUs free for it
    assert snap.joined(RAY_STATE).cluster is not None and snap.joined(
        RAY_STATE
    ).cluster.task_demands == (({"CPU": 0.01}, 1),)
    assert (
        snap.joined(RAY_STATE).cluster.total["CPU"] - snap.joined(RAY_STATE).cluster.used["CPU"]
        >= 0.01
    )
    # THEN the object store is still named as the cause, with the RolloutManager as culprit
    v = diagnosed(path).verdict
    assert (v.status.value, v.stage) == ("hung", Stage.ROLLOUT_DISPATCH)
    assert [c.role for c in v.culprits] == [Role.ROLLOUT_MANAGER]
    assert "ray_plasma.args_wait" in {f.rule for f in v.findings}
