"""The placement part (analysis/parts/placement.py) on a real Ray 2.60 head whose placement group
lost its node (tests/fixtures/real/ray-2.60-pg-rescheduling, provenance in tests/fixtures/README.md):
`on_lost_node` RESCHEDULING at both samples (scheduling attempt 2 at both, Ray's scheduling state
INFEASIBLE: the node with its `lost_node` resource is gone), `beside_it` PENDING at both
(NO_RESOURCES, attempts 21 -> 24), `after_loss` CREATED.

Ray 2.60 does not loop on the lost group here (its attempt count stays): the recording shows the
rule that tells a parked group from ray#65147's loop. The loop itself (the lost group's attempt
count rising while others stay PENDING) is the recording with sample 1's attempt count of
`on_lost_node` raised (`transforms.set_json_path` through `transforms.bundle_with_artefact`); the
loop with nothing pending is the same with `beside_it` left out of both samples."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

from slime_hangdoctor.parsers.ray_state import RAY_DASHBOARD
from slime_hangdoctor.verdict import Finding, Severity, Verdict
from tests.fixtures import transforms as tf
from tests.unit.demo_bundles import diagnosed

RECORDING = (
    Path(__file__).resolve().parents[1]
    / "fixtures"
    / "real"
    / "ray-2.60-pg-rescheduling"
    / "pg_rescheduling.tar.gz"
)
PGS = "placement_groups"
LOST, PENDING_ROW = 0, 1  # the rows of on_lost_node and beside_it in both samples' answers
ROWS = ("data", "result", "result")


def _unpacked(dest: Path) -> Path:
    with tarfile.open(RECORDING) as tar:
        tar.extractall(dest, filter="data")
    return next(p.parent for p in dest.rglob("manifest.json"))


def _answer(root: Path, sample: int) -> str:
    return (root / "raw" / RAY_DASHBOARD / "local" / f"{PGS}.s{sample}.json").read_text()


def _with_answer(root: Path, dst: Path, sample: int, text: str) -> Path:
    return tf.bundle_with_artefact(root, dst, RAY_DASHBOARD, text, target=PGS, sample=sample)


def _attempt_raised(root: Path, dst: Path, to: int) -> Path:
    """Sample 1's scheduling attempt of on_lost_node raised to `to` (Ray retrying it)."""
    path = (*ROWS, LOST, "stats", "scheduling_attempt")
    return _with_answer(root, dst, 1, tf.set_json_path(_answer(root, 1), path, to))


def _without_pending(root: Path, dst: Path) -> Path:
    """beside_it left out of both samples' answers (nothing else waits)."""
    out = root
    for sample in (0, 1):
        doc = json.loads(_answer(out, sample))
        rows = doc["data"]["result"]["result"]
        kept = [r for i, r in enumerate(rows) if i != PENDING_ROW]
        text = tf.set_json_path(_answer(out, sample), ROWS, kept)
        out = _with_answer(out, dst / f"s{sample}", sample, text)
    return out


def _only(v: Verdict, prefix: str) -> Finding:
    found = [f for f in v.findings if f.rule.startswith(prefix)]
    assert len(found) == 1, [f.rule for f in v.findings]
    return found[0]


def test_a_group_that_lost_its_node_and_is_not_retried_is_no_reschedule_loop(
    tmp_path: Path,
) -> None:
    d = diagnosed(RECORDING)
    v = d.verdict
    f = _only(v, "ray_placement.resched")
    assert (f.rule, f.severity) == ("ray_placement.rescheduling", Severity.WARNING)
    assert "'on_lost_node' lost its node and is RESCHEDULING across the window" in f.message
    assert "scheduling attempt 2 -> 2, Ray's scheduling state INFEASIBLE" in f.message
    assert "Ray is not retrying it" in f.message and "('beside_it')" in f.message
    assert any("'beside_it': PENDING at every sample" in e for e in f.evidence)
    assert not any("PR#65970" in s.why + (s.command or "") for s in v.next_steps)
    # the lost group was placed once: its suspect names no start-up
    lost = [c for c in v.culprits if "on_lost_node" in c.why]
    assert lost and all("its node was lost" in c.why for c in lost), v.culprits


def test_a_lost_group_retried_while_others_stay_pending_is_the_reschedule_loop(
    tmp_path: Path,
) -> None:
    root = _unpacked(tmp_path / "src")
    v = diagnosed(_attempt_raised(root, tmp_path / "loop", 7)).verdict
    f = _only(v, "ray_placement.resched")
    assert (f.rule, f.severity) == ("ray_placement.reschedule_loop", Severity.CRITICAL)
    assert "scheduling attempt 2 -> 7" in f.message
    assert "which stay PENDING ('beside_it')" in f.message and "ray#65147" in f.message
    steps = [s.why or s.command or "" for s in v.next_steps]
    assert any("remove_placement_group" in s and "PR#65970" in s for s in steps), steps


def test_a_retried_group_with_nothing_pending_starves_no_one(tmp_path: Path) -> None:
    root = _unpacked(tmp_path / "src")
    loop = _attempt_raised(root, tmp_path / "loop", 7)
    v = diagnosed(_without_pending(loop, tmp_path / "alone")).verdict
    f = _only(v, "ray_placement.resched")
    assert (f.rule, f.severity) == ("ray_placement.rescheduling", Severity.WARNING)
    assert "Ray retries it; no other group waits" in f.message
