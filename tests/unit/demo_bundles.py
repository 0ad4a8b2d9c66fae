"""The recorded demo bundles (tests/fixtures/analysis/demo/*.tar.gz) for the analysis tests:
unpacked to a directory (for `transforms.bundle_without_*`), and diagnosed by the product's own
offline path (`pipeline.analyse_bundle`)."""

from __future__ import annotations

import tarfile
from pathlib import Path

from slime_hangdoctor.analysis.diagnosis import Diagnosis
from slime_hangdoctor.pipeline import analyse_bundle

DEMO = Path(__file__).resolve().parents[1] / "fixtures" / "analysis" / "demo"


def unpacked(name: str, dest: Path) -> Path:
    """The recorded demo bundle `name` unpacked under `dest`: its directory."""
    with tarfile.open(DEMO / f"{name}.tar.gz") as tar:
        tar.extractall(dest, filter="data")
    return next(p.parent for p in dest.rglob("manifest.json"))


def diagnosed(path: Path) -> Diagnosis:
    """`path` (a bundle directory or archive) loaded and diagnosed as `analyse` does."""
    return analyse_bundle(path).diagnosis
