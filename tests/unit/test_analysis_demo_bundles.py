"""The analysis on bundles captured from the built-in demo job (real Ray 2.60 actors, real py-spy,
the SGLang stand-in), one per injected fault: each must earn the verdict its FaultSpec expects.
Provenance: tests/fixtures/README.md (tests/fixtures/analysis/demo/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slime_hangdoctor.analysis.diagnosis import diagnose
from slime_hangdoctor.bundle import open_bundle
from slime_hangdoctor.load import load_snapshot
from slime_hangdoctor.topology import build_topology
from slime_hangdoctor.verdict import Role, Stage, Status, Verdict
from slime_hangdoctor_demo.faults import FAULTS

DEMO = Path(__file__).resolve().parents[1] / "fixtures" / "analysis" / "demo"
CAPTURED = sorted(p.name.removesuffix(".tar.gz") for p in DEMO.glob("*.tar.gz"))


def _verdict(name: str) -> Verdict:
    with open_bundle(DEMO / f"{name}.tar.gz") as bundle:
        snapshot = load_snapshot(bundle)
    return diagnose(snapshot, build_topology(snapshot)).verdict


def test_every_capture_is_a_known_fault() -> None:
    assert len(CAPTURED) >= 8
    assert set(CAPTURED) <= set(FAULTS)


def _param(name: str) -> object:
    gap = FAULTS[name].known_gap if name in FAULTS else None
    marks = [pytest.mark.xfail(reason=gap, strict=True)] if gap else []
    return pytest.param(name, marks=marks)


@pytest.mark.parametrize("name", [_param(n) for n in CAPTURED])
def test_demo_fault_gets_its_expected_verdict(name: str) -> None:
    expected = FAULTS[name].expected
    v = _verdict(name)
    assert v.status is Status(expected.status), v.summary
    assert v.stage is Stage(expected.stage), v.summary
    if expected.culprit_role is None:
        assert v.culprits == ()
        return
    assert v.culprits, v.summary
    top = v.culprits[0]
    assert top.role is Role(expected.culprit_role), v.summary
    if expected.culprit_rank is not None:
        assert top.rank == expected.culprit_rank
    if expected.culprit_engine is not None:
        assert len({c.engine_url for c in v.culprits}) == 1  # one engine, not all of them
        assert top.engine_url is not None
    if expected.culprit_engines:  # blamed together: exactly that many engines
        urls = {c.engine_url for c in v.culprits if c.role is Role.SGLANG_ENGINE}
        assert len(urls) == len(expected.culprit_engines) and None not in urls, v.culprits
    assert v.next_steps
    assert int(v.exit_code) in (1, 2)


def test_stacks_not_asked_for_are_not_reported_as_missing(tmp_path: Path) -> None:
    """The watchdog's stackless look (`stacks: false` in the manifest's options): a progressing
    job is still progressing, and the report neither tells the user to run as root for py-spy nor
    lists the stacks as lost; the same bundle without that option does both."""
    from tests.fixtures import transforms as tf

    src = _unpacked("none", tmp_path / "src")
    lost = tf.bundle_without_sources(src, tmp_path / "lost", frozenset({"pyspy"}))
    skipped = tf.bundle_with_options(
        tf.bundle_without_sources(src, tmp_path / "skipped", frozenset({"pyspy"})), stacks=False
    )
    results = {}
    for name, path in (("lost", lost), ("skipped", skipped)):
        with open_bundle(path) as bundle:
            snapshot = load_snapshot(bundle)
        results[name] = diagnose(snapshot, build_topology(snapshot))
    for d in results.values():
        assert d.verdict.status is Status.PROGRESSING
    assert any("no Python stacks (py-spy" in b for b in results["lost"].verdict.blind_spots)
    assert any("run hangdoctor as root" in s for s in results["lost"].verdict.step_texts)
    skipped_v = results["skipped"].verdict
    assert not any("run hangdoctor as root" in s for s in skipped_v.step_texts)
    assert any("not taken in this run" in b for b in skipped_v.blind_spots)
    assert not any("py-spy" in b for b in skipped_v.blind_spots)
    assert all("no stack" not in r.state for r in results["skipped"].rows)


def test_a_missing_engine_answer_is_a_blind_spot(tmp_path: Path) -> None:
    """An ok SGLang record whose artefact is gone from the bundle says so, as every other source
    does (found by the fuzz suite: FZ3 deleted an engine's /model_info answer)."""
    root = _unpacked("rollout_engine_stuck", tmp_path)
    answer = next((root / "raw" / "sglang").rglob("*_model_info.s0.json"))
    answer.unlink()
    with open_bundle(root) as bundle:
        snapshot = load_snapshot(bundle)
    target = answer.name.removesuffix(".s0.json")
    assert f"sglang {target}: artefact missing from the bundle" in snapshot.blind_spots


def _unpacked(name: str, dest: Path) -> Path:
    """The recorded demo bundle `name` unpacked under `dest`: its directory."""
    import tarfile

    with tarfile.open(DEMO / f"{name}.tar.gz") as tar:
        tar.extractall(dest, filter="data")
    return next(p.parent for p in dest.rglob("manifest.json"))
