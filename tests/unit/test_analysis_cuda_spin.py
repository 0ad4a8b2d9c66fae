"""Issue 16, class 5: the recorded H200 CUDA kernel spin (tests/fixtures/real/gpu-h200-kernel-spin/).

A train-rank-titled process whose CUDA kernel never finishes, no communicator anywhere: NVML reads as a
rank stuck in an NCCL collective, but the verdict must blame the process (a stuck CUDA kernel / stream)
and give CUDA next steps, with Python stacks and with `--native` stacks. The contrast: the real
2x H200 broadcast hang has the same NVML signature on GPU 0 and must stay a collective hang even
when NCCL RAS and the flight recorder are removed (a peer that never joined is still there).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from slime_hangdoctor.analysis.diagnosis import diagnose
from slime_hangdoctor.bundle import open_bundle
from slime_hangdoctor.load import load_snapshot
from slime_hangdoctor.topology import build_topology
from slime_hangdoctor.verdict import Diagnosis, Role, Stage, Status
from tests.fixtures import transforms as tf

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SPIN = FIXTURES / "real" / "gpu-h200-kernel-spin"
BCAST = FIXTURES / "bundles" / "gpu-2xh200-nccl-broadcast-hang"


def _diagnose(path: Path) -> Diagnosis:
    with open_bundle(path) as bundle:
        snapshot = load_snapshot(bundle)
    return diagnose(snapshot, build_topology(snapshot))


@pytest.mark.parametrize("name", ["kernel-spin", "kernel-spin-native"])
def test_cuda_spin_blames_the_process_not_a_collective(name: str) -> None:
    d = _diagnose(SPIN / f"{name}.bundle.tar.gz")
    v = d.verdict
    assert v.status is Status.HUNG
    assert v.stage is Stage.TRAIN
    assert [(c.role, c.pid, c.gpu) for c in v.culprits] == [(Role.TRAIN_RANK, 563, 0)]
    assert "never finishes" in v.culprits[0].why
    rules = {f.rule for f in v.findings}
    assert "gpu-kernel-spin" in rules
    assert "gpu-stuck-in-collective" not in rules
    assert v.extra["gpus"] == [{"node_ip": None, "index": 0, "state": "kernel_spin"}]
    steps = " ".join(v.step_texts)
    assert "compute-sanitizer" in steps and "IPC" in steps
    for nccl in ("flight recorder", "NCCL_DEBUG", "nc 127.0.0.1 28028"):
        assert nccl not in steps, nccl
    assert any(r.culprit and r.pid == 563 for r in d.rows)
    # the native bundle already shows the CUDA call: no step asks for it again
    asks_native = any("py-spy dump --native --pid 563" in s for s in v.step_texts)
    assert asks_native is (name == "kernel-spin")


def test_cuda_spin_native_names_the_driver_call() -> None:
    v = _diagnose(SPIN / "kernel-spin-native.bundle.tar.gz").verdict
    assert "cuCtxSynchronize" in v.culprits[0].why


def test_recorded_verdicts_were_the_miss() -> None:
    """The verdicts this version replaced (recorded with the bundles): no culprit, NCCL wording."""
    import json

    for name in ("kernel-spin", "kernel-spin-native"):
        old = json.loads((SPIN / f"{name}.verdict.json").read_text())
        assert old["culprits"] == []
        assert old["findings"][0]["rule"] == "gpu-stuck-in-collective"


@pytest.mark.parametrize(
    "removed",
    [
        frozenset({"nccl_ras", "flight_recorder"}),
        frozenset({"nccl_ras", "flight_recorder", "processes"}),
    ],
)
def test_same_nvml_signature_with_a_peer_stays_a_collective_hang(
    tmp_path: Path, removed: frozenset[str]
) -> None:
    """GPU 0 of the broadcast hang reads like the spin; rank 1 never joined, so no CUDA-kernel blame."""
    v = _diagnose(tf.bundle_without_sources(BCAST, tmp_path / "b", removed)).verdict
    assert v.status is Status.HUNG
    assert [c.pid for c in v.culprits] == [572]  # rank 1 (its RANK env is in `processes`)
    assert "gpu-kernel-spin" not in {f.rule for f in v.findings}
    assert all(g["state"] != "kernel_spin" for g in v.extra["gpus"])  # type: ignore[union-attr]
