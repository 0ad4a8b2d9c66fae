"""The analysis on bundles captured from the built-in demo job (real Ray 2.60 actors, real py-spy,
the SGLang stand-in), one per injected fault: each must earn the verdict its FaultSpec expects.
Provenance: tests/fixtures/README.md (tests/fixtures/analysis/demo/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slime_hangdoctor.analysis.decide import diagnose
from slime_hangdoctor.bundle import open_bundle
from slime_hangdoctor.demo.faults import FAULTS
from slime_hangdoctor.load import load_snapshot
from slime_hangdoctor.topology import build_topology
from slime_hangdoctor.verdict import Role, Stage, Status, Verdict

DEMO = Path(__file__).resolve().parents[1] / "fixtures" / "analysis" / "demo"
CAPTURED = sorted(p.name.removesuffix(".tar.gz") for p in DEMO.glob("*.tar.gz"))


def _verdict(name: str) -> Verdict:
    with open_bundle(DEMO / f"{name}.tar.gz") as bundle:
        snapshot = load_snapshot(bundle)
    return diagnose(snapshot, build_topology(snapshot)).verdict


def test_every_capture_is_a_known_fault() -> None:
    assert len(CAPTURED) >= 8
    assert set(CAPTURED) <= set(FAULTS)


@pytest.mark.parametrize("name", CAPTURED)
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
    assert v.next_steps
    assert int(v.exit_code) in (1, 2)
