"""Each Ray-state evidence source on the demo bundle of the fault shaped for it (recorded from the
live demo job, tests/fixtures/analysis/demo/, provenance in tests/fixtures/README.md): with the source
the verdict is the fault's expected one and a finding names the source; with the source's records
removed from the bundle (`transforms.bundle_without_targets`) the verdict goes wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from slime_hangdoctor.verdict import Verdict
from slime_hangdoctor_demo.faults import FAULTS
from tests.fixtures import transforms as tf
from tests.unit.demo_bundles import DEMO, diagnosed, unpacked

# fault -> (the dashboard answers that make the source, the rule of its finding, words in it)
CASES = {
    "actor_queue_cycle": (("tasks_unfinished", "tasks_job_"), "ray_tasks.wait_cycle", "cycle"),
    "placement_infeasible": (
        ("placement_groups", "cluster_status"),
        "ray_placement.infeasible",
        "in one PACK group, cluster has 0",
    ),
    "rollout_data_plasma_full": (
        ("node_summary",),
        "ray_plasma.args_wait",
        "is PENDING_NODE_ASSIGNMENT over both samples while the object store",
    ),
}
RECORDED = sorted(n for n in CASES if (DEMO / f"{n}.tar.gz").is_file())


def _verdict(path: Path) -> Verdict:
    return diagnosed(path).verdict


def _as_expected(v: Verdict, name: str) -> bool:
    e = FAULTS[name].expected
    return (
        v.status.value == e.status
        and v.stage.value == e.stage
        and bool(v.culprits)
        and all(c.role.value == e.culprit_role for c in v.culprits)
    )


def test_every_case_is_recorded() -> None:
    assert sorted(CASES) == RECORDED


@pytest.mark.parametrize("name", RECORDED)
def test_the_source_names_the_fault(name: str, tmp_path: Path) -> None:
    _targets, rule, words = CASES[name]
    v = _verdict(unpacked(name, tmp_path))
    assert _as_expected(v, name), (v.status, v.stage, v.culprits)
    finding = next(f for f in v.findings if f.rule == rule)
    assert words in finding.message
    assert all(c.why.startswith("Ray ") for c in v.culprits), v.culprits


@pytest.mark.parametrize("name", RECORDED)
def test_without_the_source_the_verdict_goes_wrong(name: str, tmp_path: Path) -> None:
    targets, rule, words = CASES[name]
    src = unpacked(name, tmp_path / "src")
    without = tf.bundle_without_targets(src, tmp_path / "without", "ray_dashboard", targets)
    v = _verdict(without)
    assert rule not in {f.rule for f in v.findings}
    assert not any(words in c.why for c in v.culprits)
    if name == "actor_queue_cycle":
        # Status, stage and the two engines stay (their HTTP and stacks look stuck), but the
        # reason is wrong: each engine is blamed alone as unresponsive, not in a group it is
        # in fact blocked in; nothing says that each waits on the other's queue.
        assert all("unresponsive" in c.why for c in v.culprits), v.culprits
        assert not any("Ray task queues" in c.why for c in v.culprits)
    else:
        assert not _as_expected(v, name), (v.status, v.stage, v.culprits)
