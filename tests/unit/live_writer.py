"""Helpers shared by the tests that replay a recorded bundle as a run still being written, and
that scan a real Ray-titled worker: a live `BundleWriter` holding a recorded bundle's records, and
a parked train-rank process."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from slime_hangdoctor.bundle import BundleWriter, ProbeRecord, open_bundle
from tests.titled import titled_python

# A worker titled as a Ray train rank, parked in its own `train` until its stdin closes.
WORKER = (
    "import sys\ndef train(s):\n    return s.read()\nprint('ready', flush=True)\ntrain(sys.stdin)\n"
)


def writer_holding(
    src: Path,
    dest: Path,
    transform: Callable[[ProbeRecord, bytes | None], bytes | None] | None = None,
) -> BundleWriter:
    """A live writer holding every record (and its bytes) of the bundle at `src`; `transform`
    (a named transformation of tests/fixtures/transforms/) may change a record's bytes."""
    with open_bundle(src) as bundle:
        writer = BundleWriter(dest, command="test", target=bundle.manifest.target)
        for rec in bundle.manifest.probes:
            data = bundle.read(rec)
            if transform is not None:
                data = transform(rec, data)
            suffix = (Path(rec.artifact).suffix if rec.artifact else "") or ".txt"
            fresh = ProbeRecord(
                rec.source,
                rec.target,
                rec.outcome,
                rec.reason,
                node_ip=rec.node_ip,
                sample=rec.sample,
                started_at=rec.started_at,
                elapsed_s=rec.elapsed_s,
                meta=rec.meta,
            )
            writer.add(fresh, data, suffix=suffix)
    return writer


@contextmanager
def parked_train_rank() -> Iterator[int]:
    """A real process titled `ray::MegatronTrainRayActor.train`, parked; yields its pid."""
    proc = subprocess.Popen(
        titled_python("ray::MegatronTrainRayActor.train", WORKER),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        proc.stdout.readline()
        yield proc.pid
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.kill()
        proc.wait(timeout=10)
