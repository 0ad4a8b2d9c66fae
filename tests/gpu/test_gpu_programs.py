"""Real NCCL jobs on two GPUs, diagnosed live by the real CLI (marker `gpu`; skipped without GPUs).

Each program (tests/gpu/gpu_job.py) runs as a Ray job with two `MegatronTrainRayActor` ranks, one
GPU each; `slime-hangdoctor attach` (without and with `--flight-recorder`) and `check --local` must
tell hung from progressing, the stage, and the culprit rank and its GPU (harness.EXPECTED; the GPU is
the one NVML lists the culprit's pid on). With HANGDOCTOR_GPU_RECORD=DIR the bundles and verdicts are
kept in DIR (tests/gpu/run_device.sh records the fixtures under tests/fixtures/bundles/ that way).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest


def _two_gpus() -> str | None:
    """Why the GPU tests cannot run here (None: they can)."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as exc:
        return f"no NVIDIA GPU here (NVML: {type(exc).__name__})"
    try:
        count = pynvml.nvmlDeviceGetCount()
    finally:
        pynvml.nvmlShutdown()
    if count < 2:
        return f"needs 2 NVIDIA GPUs, this machine has {count}"
    for tool in ("py-spy", "ray"):
        if shutil.which(tool) is None:
            return f"{tool} is not on PATH"
    try:
        import torch

        if not torch.cuda.is_available() or not torch.distributed.is_nccl_available():
            return "torch has no CUDA/NCCL here"
    except ImportError:
        return "torch is not installed"
    return None


_WHY_NOT = _two_gpus()

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.ray,
    pytest.mark.slow,
    pytest.mark.skipif(_WHY_NOT is not None, reason=f"GPU test: {_WHY_NOT}"),
]

PROGRAMS = ("broadcast-hang", "train-stuck", "rank-killed", "allreduce-busy", "matmul-healthy")
MODES = ("attach", "attach-fr", "check-local")


@pytest.fixture(scope="module")
def record(tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get("HANGDOCTOR_GPU_RECORD")
    return Path(given) if given else tmp_path_factory.mktemp("gpu-record")


@pytest.fixture(scope="module")
def head(record: Path) -> Iterator[object]:
    from tests.gpu import harness

    ray_head = harness.start_head(record / "work", num_gpus=2)
    try:
        yield ray_head
    finally:
        ray_head.stop()


@pytest.mark.timeout(400)
@pytest.mark.parametrize("program", PROGRAMS)
def test_program_verdicts(head: object, record: Path, program: str) -> None:
    from tests.gpu import harness

    run = harness.run_program(head, program, record)  # type: ignore[arg-type]
    errors = [e for mode in MODES for e in harness.expectation_errors(run, mode)]
    assert not errors, "\n".join(errors)
    # every live rank dumps its flight recorder, except that a rank spinning in Python (the GIL held)
    # may not finish its dump within the probe's 10 s (seen on H200: train-stuck's rank 1)
    manifest = json.loads((record / f"gpu-h200-{program}-fr" / "manifest.json").read_text())
    fr = {p["target"]: p for p in manifest["probes"] if p["source"] == "flight_recorder"}
    assert fr["rank0"]["outcome"] == "ok", fr
    if program == "rank-killed":
        assert set(fr) == {"rank0"}, fr  # the killed rank has no process left to ask
    elif program == "train-stuck":
        assert fr["rank1"]["outcome"] in ("ok", "timed_out"), fr
    else:
        assert fr["rank1"]["outcome"] == "ok", fr
