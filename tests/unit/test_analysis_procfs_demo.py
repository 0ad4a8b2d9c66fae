"""The procfs sources on recorded demo bundles (tests/fixtures/analysis/demo, provenance in
tests/fixtures/README.md): the fault only they reveal gets its verdict with them, and a wrong one
without them (`transforms.bundle_without_sources`)."""

from __future__ import annotations

from pathlib import Path

from slime_hangdoctor.analysis.network import held_requests
from slime_hangdoctor.analysis.readers.sglang_http import read_engines
from slime_hangdoctor.analysis.world import build_world
from slime_hangdoctor.bundle import open_bundle
from slime_hangdoctor.load import load_snapshot
from slime_hangdoctor.parsers.kernel import KERNEL
from slime_hangdoctor.parsers.sockets import SOCKETS
from slime_hangdoctor.topology import build_topology
from slime_hangdoctor.verdict import Role, Stage, Status
from tests.fixtures import transforms as tf
from tests.unit.demo_bundles import diagnosed, unpacked


def _engine_urls(path: Path) -> list[str]:
    with open_bundle(path) as bundle:
        snapshot = load_snapshot(bundle)
    return sorted(e.url for e in build_topology(snapshot).engines)


def test_paused_engine_is_named_by_the_connections_held_to_it(tmp_path: Path) -> None:
    root = unpacked("engine_paused_by_update", tmp_path)
    urls = _engine_urls(root)
    v = diagnosed(root).verdict
    assert (v.status, v.stage) == (Status.HUNG, Stage.ROLLOUT_DISPATCH), v.summary
    top = v.culprits[0]
    assert top.role is Role.SGLANG_ENGINE and top.engine_url == urls[1], v.summary
    assert len(v.culprits) == 1
    held = next(f for f in v.findings if f.rule == "requests-held-outside-scheduler")
    assert any(urls[1] in e and "across both samples" in e for e in held.evidence), held
    with open_bundle(root) as bundle:
        snapshot = load_snapshot(bundle)
    world = build_world(snapshot, build_topology(snapshot))
    (h,) = held_requests(world, read_engines(world))
    assert h.persistent and h.singled_out and h.connections >= 1
    assert {p.role for p, _ in h.callers} == {Role.ROLLOUT_MANAGER}


def test_without_the_sockets_source_the_verdict_blames_the_wrong_process(tmp_path: Path) -> None:
    """The same bundle with the sockets records removed: nothing else says where the requests are,
    and the verdict names no culprit (before issue 16 class 4 it blamed the RolloutManager)."""
    root = unpacked("engine_paused_by_update", tmp_path / "src")
    without = tf.bundle_without_sources(
        root, tmp_path / "without", frozenset({SOCKETS})
    )
    v = diagnosed(without).verdict
    assert not any(f.rule == "requests-held-outside-scheduler" for f in v.findings)
    assert all(c.role is not Role.SGLANG_ENGINE for c in v.culprits), v.summary
    kept = tf.bundle_without_sources(root, tmp_path / "kept", frozenset({KERNEL}))
    assert diagnosed(kept).verdict.culprits[0].role is Role.SGLANG_ENGINE  # not that source
