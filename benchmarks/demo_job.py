"""The demo cluster the benchmarks diagnose: `slime_hangdoctor_demo`'s slime-shaped job on a private
Ray head, started through the demo's own launcher and stopped (with every process it started) on
exit.

Default: fault `weight_sync_engine_missing` (the `slime-hangdoctor demo` default): driver,
RolloutManager, 2 SGLangEngine actors (each with its HTTP server, scheduler and detokenizer) and 2
MegatronTrainRayActor ranks; engine 1's scheduler is stuck. `--rollout-num-gpus 3` (an existing
option of the demo job) adds a third engine: 4 more processes.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

DEFAULT_FAULT = "weight_sync_engine_missing"
READY_TIMEOUT_S = 150.0
ATTEMPTS = 2  # a Ray head on a busy 2-core machine sometimes misses its start-up deadline


@dataclass(frozen=True)
class DemoJob:
    fault: str
    extra_args: tuple[str, ...]
    dashboard_url: str
    gcs_address: str
    processes: dict[str, int]  # label -> pid, as the demo's launcher reports them
    ready_after_s: float
    # RAY_TMPDIR that makes Ray's own discovery (and `attach` with no address) find this head
    ray_tmpdir: Path | None = None


@contextmanager
def running_demo(
    fault: str = DEFAULT_FAULT,
    extra_args: tuple[str, ...] = (),
    workdir: Path | None = None,
    tp_size: int | None = None,
) -> Iterator[DemoJob]:
    """Start the demo job with `fault` (`tp_size` TP ranks per engine; None: the fault's own),
    wait until it has reached it, yield it, stop it (and remove its work dir, unless `workdir`
    was given)."""
    owned = workdir is None
    base = workdir or Path(tempfile.mkdtemp(prefix="hd-bench-demo-"))
    try:
        yield from _attempts(fault, extra_args, base, tp_size)
    finally:
        if owned:
            shutil.rmtree(base, ignore_errors=True)


def _attempts(
    fault: str, extra_args: tuple[str, ...], base: Path, tp_size: int | None = None
) -> Iterator[DemoJob]:
    from slime_hangdoctor_demo.launch import start_demo

    last_error: Exception | None = None
    for attempt in range(ATTEMPTS):
        t0 = time.monotonic()
        try:
            run = start_demo(
                fault,
                workdir=base / f"attempt{attempt}",
                extra_args=list(extra_args),
                tp_size=tp_size,
            )
        except Exception as exc:  # the launcher stopped what it had started
            last_error = exc
            continue
        try:
            run.wait_until_ready(timeout=READY_TIMEOUT_S)
            job = DemoJob(
                fault=fault,
                extra_args=tuple(extra_args),
                dashboard_url=run.head.dashboard_url,
                gcs_address=run.head.gcs_address,
                processes=run.processes(),
                ready_after_s=round(time.monotonic() - t0, 1),
                ray_tmpdir=run.head.owner_dir,
            )
        except Exception as exc:
            run.stop()
            last_error = exc
            continue
        try:
            yield job
        finally:
            run.stop()
        return
    raise RuntimeError(f"the demo job did not start in {ATTEMPTS} attempts: {last_error}")
