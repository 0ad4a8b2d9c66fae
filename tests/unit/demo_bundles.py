"""The recorded demo bundles (tests/fixtures/analysis/demo/*.tar.gz) for the analysis tests:
unpacked to a directory (for `transforms.bundle_without_*`), and diagnosed by the product's own
offline path (`pipeline.analyse_bundle`)."""

from __future__ import annotations

import functools
import tarfile
from pathlib import Path

from slime_hangdoctor.analysis.diagnosis import Diagnosis
from slime_hangdoctor.bundle import open_bundle
from slime_hangdoctor.load import load_snapshot
from slime_hangdoctor.parsers.pyspy import ALL_STACKS, ThreadStack
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


# The weight-broadcast hang of demo fault `weight_sync_engine_wedged` (SGLang stand-in posting every
# broadcast with async_op=True, then handle.wait(), as SGLang 0.5.15.post1), recorded twice from the
# same hang: plain py-spy (demo/) and --native (demo_native/). Pids of that capture:
WEDGED = "weight_sync_engine_wedged"
WEDGED_PIDS = {
    "engine 0 scheduler": 11598,  # in handle.wait(): innermost Python frame update_weights_from_...
    "engine 1 scheduler": 11620,  # wedged before the broadcast (the stand-in's _synchronize)
    "engine 0 actor": 11464,
    "engine 1 actor": 11465,
    "train rank 0": 11671,  # in dist.broadcast (gloo: its send to engine 1 never completes)
    "train rank 1": 11768,  # in the gloo barrier after the sync
}


def wedged_bundle(native: bool) -> Path:
    """The recorded archive of the wedged weight broadcast, plain or --native."""
    return DEMO.parent / ("demo_native" if native else "demo") / f"{WEDGED}.tar.gz"


@functools.lru_cache(maxsize=16)
def recorded_main_thread(bundle: Path, pid: int, sample: int = 0) -> ThreadStack:
    """The main thread of `pid` at `sample`, as the product's loader reads it from `bundle`."""
    with open_bundle(bundle) as opened:
        snapshot = load_snapshot(opened)
    obs = next(s for s in snapshot.joined(ALL_STACKS) if s.pid == pid and s.sample == sample)
    return next(t for t in obs.stack.threads if t.name == "MainThread")
