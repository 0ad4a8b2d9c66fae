"""GPU states from the recorded 2x H200 bundles (tests/fixtures/bundles/, real NVML series and GPM
readings), read as the product loads them (`load_snapshot`). A variant is a named transformation
of a bundle (tests/fixtures/transforms/): without its GPM probe, or with another real GPM reading."""

from __future__ import annotations

from pathlib import Path

import pytest

from slime_hangdoctor.analysis.readers.nvml import GpuRead, GpuState, gpu_of_pid, read_gpus
from slime_hangdoctor.bundle import open_bundle
from slime_hangdoctor.load import load_snapshot
from tests.fixtures import transforms as tf

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
BUNDLES = FIXTURES / "bundles"
BCAST = BUNDLES / "gpu-2xh200-nccl-broadcast-hang"  # run3 `hang`: rank 0 (pid 571) in the broadcast
REAL = FIXTURES / "real" / "gpu-2xh200-nccl-broadcast-hang"  # the reproducer's raw readings
STUCK, IDLE, BUSY = GpuState.STUCK, GpuState.IDLE, GpuState.BUSY


def _reads(bundle: Path) -> list[GpuRead]:
    with open_bundle(bundle) as opened:
        return read_gpus(load_snapshot(opened))


def _states(bundle: Path) -> dict[int, GpuState]:
    return {g.index: g.state for g in _reads(bundle)}


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # recorded live by `attach` (bundles/README.md, "gpu-h200-*"): run 1's 64 MiB broadcast,
        # finished by the time of the reading; run 3's broadcast hang (rank 1's GPU spins); a busy
        # all_reduce loop on both GPUs
        ("gpu-h200-broadcast-64mib", {0: IDLE, 1: IDLE}),
        ("gpu-h200-broadcast-hang", {0: IDLE, 1: STUCK}),
        ("gpu-h200-allreduce-busy", {0: BUSY, 1: BUSY}),
        # the reproducer's run 3 (NVML series and GPM): rank 1 never joined
        ("gpu-2xh200-nccl-broadcast-hang", {0: STUCK, 1: IDLE}),
        ("gpu-2xh200-nccl-train-stuck", {0: STUCK, 1: IDLE}),
        ("gpu-2xh200-matmul-healthy", {0: BUSY, 1: IDLE}),
    ],
)
def test_states_of_recorded_bundles(name: str, expected: dict[int, GpuState]) -> None:
    assert _states(BUNDLES / name) == expected


def test_without_gpm_the_nvml_series_alone_reads_the_same_states(tmp_path: Path) -> None:
    """The coarse instrument alone: util 100 % / memory util 0 % with flat NVLink is stuck."""
    without = tf.bundle_without_sources(BCAST, tmp_path / "b", frozenset({"gpm"}))
    assert _states(without) == {0: STUCK, 1: IDLE}


def test_gpm_busy_overrides_a_stuck_looking_nvml_reading(tmp_path: Path) -> None:
    """A stuck-looking util pair (100 / 0) with GPM showing DRAM traffic is busy (GPM is the finer
    instrument): the hang's NVML series beside run 2's GPM reading of a busy all_reduce."""
    busy_gpm = (REAL / "run2_gpm_busy.json").read_text()
    mixed = tf.bundle_with_artefact(BCAST, tmp_path / "b", "gpm", busy_gpm)
    assert _states(mixed)[0] is BUSY


def test_evidence_and_pid_map(tmp_path: Path) -> None:
    reads = _reads(tf.bundle_without_sources(BCAST, tmp_path / "b", frozenset({"gpm"})))
    node = reads[0].node_ip
    g0 = gpu_of_pid(reads, 571, node)
    assert g0 is not None and g0.index == 0
    text = g0.evidence()
    assert "util 100% / memory util 0%" in text and "NVLink counters flat" in text
    assert gpu_of_pid(reads, 572, None) is not None
    assert gpu_of_pid(reads, 999, node) is None


def test_one_shot_reading_of_the_ray_capture() -> None:
    reads = _reads(BUNDLES / "gpu-2xh200-ray-nccl-hang")
    assert [(g.index, g.state, g.readings) for g in reads] == [
        (0, STUCK, 1),
        (1, IDLE, 1),
    ]
