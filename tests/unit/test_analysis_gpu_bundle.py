"""The analysis on the real 2x H200 bundles (tests/fixtures/bundles/): the verdicts the README
expects, and the broadcast hang found again from each independent source alone (the other sources'
records removed from the manifest with `transforms.bundle_without_sources`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slime_hangdoctor.analysis.diagnosis import diagnose
from slime_hangdoctor.bundle import open_bundle
from slime_hangdoctor.load import load_snapshot
from slime_hangdoctor.topology import build_topology
from slime_hangdoctor.verdict import Diagnosis, Role, Stage, Status
from tests.fixtures import transforms as tf

BUNDLES = Path(__file__).resolve().parents[1] / "fixtures" / "bundles"
BCAST = BUNDLES / "gpu-2xh200-nccl-broadcast-hang"

RAS, NVML, GPM, FR, PYSPY = "nccl_ras", "nvml", "gpm", "flight_recorder", "pyspy"


def _diagnose(path: Path) -> Diagnosis:
    with open_bundle(path) as bundle:
        snapshot = load_snapshot(bundle)
    return diagnose(snapshot, build_topology(snapshot))


def test_broadcast_hang_full_bundle() -> None:
    d = _diagnose(BCAST)
    v = d.verdict
    assert v.status is Status.HUNG
    assert v.stage is Stage.NCCL_BROADCAST
    assert len(v.culprits) == 1
    c = v.culprits[0]
    assert (c.role, c.rank, c.gpu, c.pid, c.node_ip) == (Role.TRAIN_RANK, 1, 1, 572, "192.0.2.2")
    assert v.confidence == "high"
    assert {"ras", "flight_recorder", "nvml", "stacks"} <= set(
        v.findings[0].message.split("sources: ")[1].rstrip(")").split(", ")
    )
    assert any(r.culprit and r.pid == 572 for r in d.rows)
    assert not any(r.culprit and r.pid == 571 for r in d.rows)
    assert d.excerpt is not None and "never_join" in d.excerpt.frames[0]
    assert any("py-spy dump --native --pid 572" in s for s in v.step_texts)


@pytest.mark.parametrize(
    ("keep", "removed", "named"),
    [
        (RAS, {NVML, GPM, FR}, ("NVML", "flight-recorder")),
        (NVML, {RAS, FR}, ("NCCL RAS", "flight-recorder")),
        (FR, {RAS, NVML, GPM}, ("NCCL RAS", "NVML")),
    ],
)
def test_each_source_with_stacks_finds_the_same_culprit(
    tmp_path: Path, keep: str, removed: set[str], named: tuple[str, ...]
) -> None:
    variant = tf.bundle_without_sources(BCAST, tmp_path / "b", frozenset(removed))
    v = _diagnose(variant).verdict
    assert v.status is Status.HUNG
    assert v.stage is Stage.NCCL_BROADCAST
    assert [(c.rank, c.pid) for c in v.culprits] == [(1, 572)]
    for word in named:
        assert any(word in b for b in v.blind_spots), (word, v.blind_spots)


@pytest.mark.parametrize(
    ("keep", "removed", "source"),
    [
        (RAS, {NVML, GPM, FR, PYSPY}, "ras"),
        (NVML, {RAS, FR, PYSPY}, "nvml"),
        (FR, {RAS, NVML, GPM, PYSPY}, "flight_recorder"),
    ],
)
def test_each_source_alone_without_stacks_names_rank_1(
    tmp_path: Path, keep: str, removed: set[str], source: str
) -> None:
    """Stacks removed too: the one remaining source must name the culprit by itself."""
    variant = tf.bundle_without_sources(BCAST, tmp_path / "b", frozenset(removed))
    d = _diagnose(variant)
    v = d.verdict
    assert v.status is Status.HUNG
    assert [(c.rank, c.pid) for c in v.culprits] == [(1, 572)]
    assert source in v.findings[0].message
    assert any("no Python stacks" in b for b in v.blind_spots)
    if keep == FR:  # the stuck collective's frames carry the stage; FR knows no GPU
        assert v.stage is Stage.NCCL_BROADCAST
        assert v.culprits[0].gpu is None
    else:  # RAS names the NVML device, NVML is the device
        assert v.culprits[0].gpu == 1


def test_cpu_seconds_alone_decide_nothing(tmp_path: Path) -> None:
    """Only /proc is left: rank 0 burns a core (it spins at a CUDA sync), which is not progress,
    and nothing else can show progress or a hang: unknown, exit 3."""
    variant = tf.bundle_without_sources(
        BCAST, tmp_path / "b", frozenset({RAS, NVML, GPM, FR, PYSPY})
    )
    v = _diagnose(variant).verdict
    assert v.status is Status.UNKNOWN
    assert v.culprits == ()
    assert int(v.exit_code) == 3


def test_train_stuck_bundle() -> None:
    v = _diagnose(BUNDLES / "gpu-2xh200-nccl-train-stuck").verdict
    assert v.status is Status.HUNG
    assert v.stage is Stage.TRAIN
    assert [(c.rank, c.pid, c.gpu) for c in v.culprits] == [(1, 709, 1)]


def test_ray_hang_bundle() -> None:
    d = _diagnose(BUNDLES / "gpu-2xh200-ray-nccl-hang")
    v = d.verdict
    assert v.status is Status.HUNG
    assert v.stage is Stage.NCCL_BROADCAST
    assert [(c.rank, c.pid, c.gpu) for c in v.culprits] == [(1, 3446, 1)]
    assert v.culprits[0].actor_id == "6944657eac16ceeef8f2dbeb02000000"
    assert any(r.role is Role.DRIVER for r in d.rows)
    assert any("one sample only" in b for b in v.blind_spots)


@pytest.mark.parametrize("name", ["gpu-2xh200-matmul-healthy", "gpu-2xh200-ray-nccl-busy"])
def test_healthy_bundles_are_not_hung(name: str) -> None:
    v = _diagnose(BUNDLES / name).verdict
    assert v.status is Status.PROGRESSING
    assert v.stage is Stage.NONE
    assert v.culprits == ()
    assert int(v.exit_code) == 0
