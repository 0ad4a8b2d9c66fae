"""The pressure source (Linux PSI), added as issue 23's proof that a source is one spec: its own
parser, collector and analysis modules, and one line in sources.py (the last test checks that).

Fixtures: tests/fixtures/pressure/pressure-{idle,io-stress}, two samples 3 s apart of this
machine's real /proc/pressure through the real collector, idle and with six O_DIRECT dsync
writers running (tests/fixtures/pressure/capture.py)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from slime_hangdoctor.analysis.diagnosis import diagnose
from slime_hangdoctor.bundle import BundleWriter, open_bundle
from slime_hangdoctor.collect.pressure import record_pressure
from slime_hangdoctor.errors import ParseError
from slime_hangdoctor.load import load_snapshot
from slime_hangdoctor.outcome import Outcome
from slime_hangdoctor.parsers.pressure import SPEC, parse_pressure
from slime_hangdoctor.snapshot import Snapshot
from slime_hangdoctor.topology import build_topology
from tests.fixtures import transforms as tf

ROOT = Path(__file__).resolve().parents[2]
PRESSURE = ROOT / "tests" / "fixtures" / "pressure"
DEMO = ROOT / "tests" / "fixtures" / "analysis" / "demo"


def _snapshot(path: Path) -> Snapshot:
    with open_bundle(path) as bundle:
        return load_snapshot(bundle)


def _moved_to(snap: Snapshot, node_ip: str | None, at: float) -> tuple[object, ...]:
    """The recorded pressure samples as read on `node_ip` (`transforms.observed_relabelled`)."""
    return tuple(
        tf.observed_relabelled(o, node_ip=node_ip, at=at + o.sample * snap.window_s)
        for o in snap.facts(SPEC)
    )


def test_the_loader_files_pressure_by_its_spec_alone() -> None:
    snap = _snapshot(PRESSURE / "pressure-io-stress")
    seen = snap.facts(SPEC)
    assert [o.sample for o in seen] == [0, 1]
    assert {r.resource for r in seen[0].fact.resources} == {"cpu", "memory", "io"}
    io0, io1 = (o.fact.of("io") for o in seen)
    assert io0 is not None and io1 is not None and io1.some.total_us > io0.some.total_us


def test_storage_stall_is_a_finding_beside_an_unchanged_verdict() -> None:
    """The io-stress samples, moved onto a recorded demo job's node: the verdict keeps its
    status, stage and culprits, and gains the node-pressure warning; the idle ones add nothing."""
    demo = _snapshot(DEMO / "checkpoint_stuck_storage.tar.gz")
    node = next(iter({p.node_ip for p in demo.processes_at(0)}))
    before = diagnose(demo, build_topology(demo)).verdict
    for name, expected in (("pressure-io-stress", True), ("pressure-idle", False)):
        added = _moved_to(_snapshot(PRESSURE / name), node, demo.manifest.created_at)
        snap = dataclasses.replace(demo, observed=demo.observed + added)
        after = diagnose(snap, build_topology(snap)).verdict
        assert (after.status, after.stage, after.culprits) == (
            before.status,
            before.stage,
            before.culprits,
        )
        found = [f for f in after.findings if f.rule == "node-pressure"]
        assert bool(found) is expected, name
        if expected:
            assert any(line.startswith("io: some task stalled") for line in found[0].evidence)


def test_a_cut_pressure_file_is_a_parse_error() -> None:
    record = next((PRESSURE / "pressure-idle" / "raw" / "pressure").rglob("*.s0.json"))
    text = record.read_text()
    cut = tf.truncate_at(text, text.index("total=") + 3)
    with pytest.raises(ParseError):
        parse_pressure(cut.encode())


def test_the_collector_reads_this_node_and_says_why_not_where_psi_is_absent(
    tmp_path: Path,
) -> None:
    writer = BundleWriter(tmp_path / "b", command="test")
    here = record_pressure(writer, node_ip=None, sample=0)
    if not Path("/proc/pressure/io").exists():
        pytest.skip("this kernel has no PSI")
    assert here.outcome is Outcome.OK
    assert parse_pressure((writer.root / str(here.artifact)).read_bytes()).of("io") is not None
    # a kernel built without PSI has no /proc/pressure at all
    absent = record_pressure(writer, node_ip=None, sample=1, root=str(tmp_path / "no-psi"))
    assert absent.outcome is Outcome.UNAVAILABLE and absent.artifact is None
    assert absent.reason is not None and "io:" in absent.reason


def test_the_source_touched_its_own_modules_and_one_line_elsewhere() -> None:
    """The worked example of docs/architecture.md, checked: outside its own modules, no product
    file names the pressure source but the one line of sources.py."""
    own = {
        "slime_hangdoctor/parsers/pressure.py",
        "slime_hangdoctor/collect/pressure.py",
        "slime_hangdoctor/analysis/parts/pressure.py",
    }
    mentions: dict[str, int] = {}
    for path in sorted((ROOT / "slime_hangdoctor").rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        if rel in own or "/demo/" in rel:
            continue
        n = len(re.findall(r"\bpressure\b", path.read_text()))
        if n:
            mentions[rel] = n
    assert mentions == {"slime_hangdoctor/sources.py": 1}
