"""The GPU fixture bundles (tests/fixtures/bundles/, made by tests/fixtures/make_gpu_bundles.py) are
readable bundles whose artefacts are the real files, and the script rebuilds them byte for byte."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from slime_hangdoctor.bundle import ProbeRecord, open_bundle

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
BUNDLES = FIXTURES / "bundles"
SCRIPT = FIXTURES / "make_gpu_bundles.py"
BCAST = FIXTURES / "real" / "gpu-2xh200-nccl-broadcast-hang"
GPU_BUNDLES = (
    "gpu-2xh200-nccl-broadcast-hang",
    "gpu-2xh200-nccl-train-stuck",
    "gpu-2xh200-matmul-healthy",
    "gpu-2xh200-ray-nccl-hang",
    "gpu-2xh200-ray-nccl-busy",
)
RUN3 = {
    "gpu-2xh200-nccl-broadcast-hang": "hang",
    "gpu-2xh200-nccl-train-stuck": "train_stuck",
    "gpu-2xh200-matmul-healthy": "matmul",
}
_VOLATILE = ("created_at", "finished_at")


def _raw_files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in (root / "raw").rglob("*") if p.is_file()
    }


@pytest.mark.parametrize("name", GPU_BUNDLES)
def test_bundle_opens_and_every_artefact_exists(name: str) -> None:
    with open_bundle(BUNDLES / name) as bundle:
        records = list(bundle.records())
        assert records
        for rec in records:
            assert rec.artifact is not None, rec
            data = bundle.read(rec)
            assert data, f"{rec.source} {rec.target}: artefact {rec.artifact} missing or empty"
        listed = {rec.artifact for rec in records}
        assert listed == set(_raw_files(bundle.root)), "raw/ holds files no record names"
        assert bundle.manifest.hosts == ("192.0.2.2",)


@pytest.mark.parametrize("name", list(RUN3))
def test_run3_artefacts_are_the_real_files(name: str) -> None:
    mode = RUN3[name]
    with open_bundle(BUNDLES / name) as bundle:
        by_source: dict[str, list[ProbeRecord]] = {}
        for rec in bundle.records():
            by_source.setdefault(rec.source, []).append(rec)
        for source, suffix in (
            ("nvml", "nvml.json"),
            ("gpm", "gpm.json"),
            ("nccl_ras", "ras.json"),
        ):
            (rec,) = by_source[source]
            assert bundle.read(rec) == (BCAST / f"run3_{mode}.{suffix}").read_bytes()
        pickles = sorted(BCAST.glob(f"run3_{mode}.fr.*.pkl"))
        fr = sorted(by_source.get("flight_recorder", []), key=lambda r: r.meta["rank"])
        assert [bundle.read(r) for r in fr] == [p.read_bytes() for p in pickles]
        assert [r.meta["rank"] for r in fr] == list(range(len(pickles)))
        assert [r.sample for r in by_source["processes"]] == [0, 1]
        assert bundle.manifest.window_s == 10.0


def test_script_rebuilds_identical_bundles(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(tmp_path)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    for name in GPU_BUNDLES:
        assert _raw_files(tmp_path / name) == _raw_files(BUNDLES / name), name
        with open_bundle(tmp_path / name) as fresh, open_bundle(BUNDLES / name) as kept:
            a, b = fresh.manifest.to_json(), kept.manifest.to_json()
            for key in _VOLATILE:
                a.pop(key), b.pop(key)
            a.pop("tool_version"), b.pop("tool_version")
            assert a == b, name
