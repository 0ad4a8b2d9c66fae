"""collect -> bundle -> snapshot -> analysis: the composition that attach, analyse, demo and check share."""

from __future__ import annotations

import dataclasses
import importlib
import os
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from slime_hangdoctor import __version__
from slime_hangdoctor.bundle import BundleWriter, Manifest, archive, open_bundle
from slime_hangdoctor.collect.options import CollectOptions
from slime_hangdoctor.collect.run import ProgressFn
from slime_hangdoctor.collect.run import collect as do_collect
from slime_hangdoctor.load import ParseCache, load_snapshot
from slime_hangdoctor.snapshot import Snapshot
from slime_hangdoctor.topology import Topology, build_topology
from slime_hangdoctor.verdict import Diagnosis, unknown_verdict


@dataclass(frozen=True)
class Analysed:
    diagnosis: Diagnosis
    snapshot: Snapshot | None = None
    topology: Topology | None = None
    manifest: Manifest | None = None
    bundle: Path | None = None  # kept bundle directory, when one was asked for
    work_moved: bool | None = None  # CollectResult.work_moved of a live run
    node_ip: str | None = None  # CollectResult.node_ip of a live run: where its collector ran


def analyse_bundle(path: Path, cache: ParseCache | None = None) -> Analysed:
    """Offline: open a bundle, parse it, diagnose it. `cache`: what the run that wrote this bundle
    already parsed of it (never for a bundle given to `analyse`: that one is untrusted)."""
    from slime_hangdoctor.analysis.diagnosis import diagnose
    from slime_hangdoctor.analysis.timeline import timeline

    with open_bundle(path) as opened:
        snapshot = load_snapshot(opened, cache)
        manifest = opened.manifest
    topology = build_topology(snapshot)
    diagnosis = dataclasses.replace(diagnose(snapshot, topology), timeline=timeline(snapshot))
    return Analysed(_with_bundle(diagnosis, path), snapshot, topology, manifest)


def _with_bundle(diagnosis: Diagnosis, path: Path | None) -> Diagnosis:
    """The verdict names the bundle it was read from or written to (`Verdict.bundle`) and the
    doctor that made it (`tool_version`)."""
    bundle = None if path is None else os.path.abspath(path)
    verdict = dataclasses.replace(diagnosis.verdict, bundle=bundle, tool_version=__version__)
    return dataclasses.replace(diagnosis, verdict=verdict)


def attach(
    address: str | None,
    opts: CollectOptions,
    *,
    out: Path | None = None,
    progress: ProgressFn | None = None,
    command: str = "attach",
    judge_work_moved: Callable[[BundleWriter], bool] | None = None,
    on_window: Callable[[], None] | None = None,
) -> Analysed:
    """Live: collect into `out` (or a temp dir), then analyse. Never raises for an unreachable Ray.
    `judge_work_moved`: `collect.run.collect`'s (the watchdog's look passes its own); `on_window`:
    called as the window's wait begins, beside the analysis's own import there."""
    started = time.monotonic()

    def window_begins() -> None:
        preload("slime_hangdoctor.analysis.diagnosis")
        if on_window is not None:
            on_window()

    with tempfile.TemporaryDirectory(prefix="hangdoctor-") as tmpdir:
        root = out if out is not None else Path(tmpdir) / "bundle"
        result = do_collect(
            address,
            opts,
            root,
            command=command,
            progress=progress,
            judge_work_moved=judge_work_moved,
            on_window=window_begins,
        )
        if result.ray_error is not None and not opts.local:
            verdict = unknown_verdict(
                f"Could not read the Ray cluster: {result.ray_error}",
                blind_spots=(str(result.ray_error),),
                next_steps=(result.ray_error.help_text,) if result.ray_error.help_text else (),
                elapsed_s=time.monotonic() - started,
            )
            verdict = dataclasses.replace(verdict, tool_version=__version__)
            return Analysed(Diagnosis(verdict), manifest=result.manifest)
        analysed = analyse_bundle(result.root, result.cache)
        kept = archive(result.root) if out is not None else None
    verdict = dataclasses.replace(
        analysed.diagnosis.verdict,
        elapsed_s=time.monotonic() - started,
        bundle=None if kept is None else str(kept),
    )
    return dataclasses.replace(
        analysed,
        diagnosis=dataclasses.replace(analysed.diagnosis, verdict=verdict),
        bundle=out,
        work_moved=result.work_moved,
        node_ip=result.node_ip,
    )


def preload(*modules: str) -> None:
    """Import `modules` in a thread: what a run needs only after its second sample (the analysis,
    the renderer), loaded while the window passes rather than after it (~0.1 s of a 2-core node's
    CPU each)."""

    def load() -> None:
        for module in modules:
            importlib.import_module(module)

    threading.Thread(target=load, name="preload", daemon=True).start()
