"""GPU states from real NVML series and GPM readings of 2x H200 (parsed by the real parsers)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slime_hangdoctor.analysis.gpu import GpuState, gpu_of_pid, read_gpus
from slime_hangdoctor.parsers.nvml import GpuObs, parse_gpm, parse_nvml_series
from slime_hangdoctor.source_spec import Observed
from tests.unit.analysis_builders import snapshot

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
BCAST = REAL / "gpu-2xh200-nccl-broadcast-hang"
NODE = "192.0.2.2"


def _states(nvml: str, gpm: str | None = None) -> dict[int, GpuState]:
    series = parse_nvml_series((BCAST / nvml).read_text())
    gpms = (Observed("gpm", NODE, 0, parse_gpm((BCAST / gpm).read_text())),) if gpm else ()
    reads = read_gpus(snapshot(gpus=(GpuObs(NODE, series),), gpm=gpms))
    return {g.index: g.state for g in reads}


@pytest.mark.parametrize(
    ("nvml", "gpm", "expected"),
    [
        ("run1_idle.json", None, {0: GpuState.IDLE, 1: GpuState.IDLE}),
        ("run1_hang.json", None, {0: GpuState.STUCK, 1: GpuState.IDLE}),
        ("run1_busy.json", None, {0: GpuState.BUSY, 1: GpuState.BUSY}),
        ("run3_hang.nvml.json", "run3_hang.gpm.json", {0: GpuState.STUCK, 1: GpuState.IDLE}),
        (
            "run3_train_stuck.nvml.json",
            "run3_train_stuck.gpm.json",
            {0: GpuState.STUCK, 1: GpuState.IDLE},
        ),
        ("run3_matmul.nvml.json", "run3_matmul.gpm.json", {0: GpuState.BUSY, 1: GpuState.IDLE}),
    ],
)
def test_states_of_real_series(nvml: str, gpm: str | None, expected: dict[int, GpuState]) -> None:
    assert _states(nvml, gpm) == expected


def test_gpm_busy_overrides_a_stuck_looking_nvml_reading() -> None:
    """A stuck-looking util pair (100 / 0) with GPM showing DRAM traffic is busy (GPM is the finer
    instrument): the hang series combined with the busy all_reduce GPM reading."""
    assert _states("run3_hang.nvml.json", "run2_gpm_busy.json")[0] is GpuState.BUSY


def test_evidence_and_pid_map() -> None:
    series = parse_nvml_series((BCAST / "run3_hang.nvml.json").read_text())
    reads = read_gpus(snapshot(gpus=(GpuObs(NODE, series),)))
    g0 = gpu_of_pid(reads, 571, NODE)
    assert g0 is not None and g0.index == 0
    text = g0.evidence()
    assert "util 100% / memory util 0%" in text and "NVLink counters flat" in text
    assert gpu_of_pid(reads, 572, None) is not None
    assert gpu_of_pid(reads, 999, NODE) is None


def test_one_shot_reading_of_the_ray_capture() -> None:
    series = parse_nvml_series(
        (REAL / "gpu-2xh200-ray-nccl-hang" / "hang" / "nvml.json").read_text()
    )
    reads = read_gpus(snapshot(gpus=(GpuObs(NODE, series),)))
    assert [(g.index, g.state, g.readings) for g in reads] == [
        (0, GpuState.STUCK, 1),
        (1, GpuState.IDLE, 1),
    ]
