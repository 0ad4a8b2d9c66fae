"""One collection run: discover the job, sample it twice over the window, write the bundle.

Sample 0 and sample 1 are taken `window_s` apart; NVML is sampled continuously between them. This node
is sampled in-process; every other node that hosts slime processes is sampled by a Ray task pinned to
it (`collect.remote`). Engines and routers are probed by URL from here. Every probe runs under its own
timeout, all of them under the run's deadline; nothing here raises past a probe (an unreachable Ray is
returned as `ray_error`, which the caller turns into exit 3 unless `--local`).

The phases live in modules of their own, each handed an immutable `RunContext` and returning what it
found (no state shared between them but the run's one `Background`: the threads it joins and the Ray
driver it closes): run_connect (the cluster, and where this collector stands in it), run_window (the
two samples and the window), run_sample (one sample), run_dashboard, run_remote and run_endpoints (the
cluster's, the other nodes' and the engines' and routers' probes of a sample).
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slime_hangdoctor.bundle import BundleWriter, Manifest
from slime_hangdoctor.collect.node import parse_cache
from slime_hangdoctor.collect.options import CollectOptions, Deadline
from slime_hangdoctor.collect.run_connect import connect_ray, local_ips
from slime_hangdoctor.collect.run_context import (
    Background,
    ProgressFn,
    RayConnection,
    RunContext,
    read_before,
    sources_off,
)
from slime_hangdoctor.collect.run_dashboard import (
    BACKGROUND_DASHBOARD_PROBES,
    DASHBOARD_PROBES,
    DashboardProbe,
)
from slime_hangdoctor.collect.run_endpoints import router_metrics_urls
from slime_hangdoctor.collect.run_sample import FIRST_REST_WAIT_S
from slime_hangdoctor.collect.run_window import two_samples
from slime_hangdoctor.errors import RayUnreachable
from slime_hangdoctor.load import ParseCache

# The names other modules and the tests import from here (the phases live in run_*.py)
__all__ = [
    "BACKGROUND_DASHBOARD_PROBES",
    "DASHBOARD_PROBES",
    "FIRST_REST_WAIT_S",
    "CollectResult",
    "DashboardProbe",
    "ProgressFn",
    "collect",
    "read_before",
    "router_metrics_urls",
    "sources_off",
]


@dataclass(frozen=True)
class CollectResult:
    root: Path
    manifest: Manifest
    elapsed_s: float
    # why the Ray cluster could not be read (None when it was): the error, its message redacted and
    # its help (how to give the address) kept for the user
    ray_error: RayUnreachable | None = None
    # With `stacks_only_if_stalled`: did anything that moves only with work move between the two
    # samples (None: not asked, or no second sample).
    work_moved: bool | None = None
    # the artefacts of this bundle already read and parsed (for the analysis of the same run)
    cache: ParseCache | None = None
    # The Ray node this collector ran on (the node_ip of its own process scan); None where it
    # knows none (--local, or a machine outside the cluster).
    node_ip: str | None = None


def collect(
    address: str | None,
    opts: CollectOptions,
    out: Path,
    *,
    command: str = "collect",
    progress: ProgressFn | None = None,
    judge_work_moved: Callable[[BundleWriter], bool] | None = None,
    on_window: Callable[[], None] | None = None,
) -> CollectResult:
    """Collect evidence from the job at `address` into a bundle at `out`.

    `on_window` is called once the first sample is taken, as the window's wait begins (the CLI
    loads what it needs only after the second sample there: the analysis, the renderer).

    With `opts.stacks_only_if_stalled`, `judge_work_moved` (the watchdog's: what counts as work is
    its policy, not the collector's) says, from what the writer holds after the second sample,
    whether work moved between the samples; its answer is CollectResult.work_moved, and the second
    sample's stacks are taken only when it says no (or when no judge was given)."""
    say = progress or (lambda _msg: None)
    deadline = Deadline(opts.timeout_s)
    writer = BundleWriter(
        out,
        command=command,
        window_s=opts.window_s,
        target={
            "address": address,
            "sglang_urls": list(opts.sglang_urls),
            "local": opts.local,
            "doctor_pid": os.getpid(),  # our own Ray driver (multi-node) is not the job's driver
        },
        options=_options_record(opts),
        known_secrets=opts.secrets(address),
    )
    ray: RayConnection | RayUnreachable | None = None
    if not opts.local:
        ray = connect_ray(writer, opts, address, deadline, say)
    ray_error = ray if isinstance(ray, RayUnreachable) else None
    background = Background()
    with cf.ThreadPoolExecutor(
        max_workers=max(2, opts.concurrency), thread_name_prefix="probe"
    ) as pool:
        ctx = RunContext(
            writer,
            opts,
            deadline,
            pool,
            say,
            address,
            local_ips(),
            ray if isinstance(ray, RayConnection) else None,
            window_end=time.time() + opts.window_s,
        )
        try:
            window = two_samples(
                ctx, background, on_window=on_window, judge_work_moved=judge_work_moved
            )
        finally:
            background.close()  # nothing more is asked of the other nodes
    manifest = writer.finish()
    return CollectResult(
        writer.root,
        manifest,
        deadline.elapsed(),
        ray_error,
        window.work_moved,
        parse_cache(writer),
        window.node_ip,
    )


# What the manifest records of the options: every option, but a secret only as given or not, and
# not the URLs (they may carry credentials), the py-spy path or the free-form extras.
_SECRET_OPTIONS = ("api_key", "ray_token")
_UNRECORDED_OPTIONS = ("sglang_urls", "router_urls", "pyspy", "extra")


def _options_record(opts: CollectOptions) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(opts):
        if f.name in _UNRECORDED_OPTIONS:
            continue
        value = getattr(opts, f.name)
        if f.name in _SECRET_OPTIONS:
            out[f"{f.name}_given"] = bool(value)
        else:
            out[f.name] = value
    return out
