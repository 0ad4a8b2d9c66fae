"""The names of the evidence sources the analysis weighs against each other, and how they map onto
the bundle's source names and the suspect finders' names (`SOURCE_NAMES`).

Typed, so that a misspelt source is a type error rather than a source that silently never counts.
A source whose suspects or hang evidence are weighed adds its name and its `SOURCE_NAMES` row here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Source = Literal[
    "ras",  # NCCL RAS (collect/nccl_ras.py)
    "flight_recorder",  # torch's NCCL flight recorder dumps
    "nvml",  # GPU readings (NVML, or Ray's node summary)
    "gpu_kernel",  # a GPU spinning with no communicator anywhere (analysis/cuda_spin.py)
    "gpm",  # GPU performance metrics
    "stacks",  # py-spy / Ray traceback stacks
    "sglang",  # SGLang engine and router HTTP answers
    "rollout",  # the RolloutManager's event loop (read from its stacks)
    "driver",  # the job's driver (read from its stacks)
    "ray",  # Ray's state API (actors, tasks, jobs)
    "ray_tasks",  # Ray's task list: actor queues, wait-for cycles, paused engines, overlong methods
    "ray_placement",  # Ray's placement groups against the cluster's capacity
    "ray_plasma",  # a task whose arguments do not fit in the object store (the raylets' stores)
    "processes",  # the process table (psutil / procfs)
    "cpu",  # CPU time of the slime processes between the samples
    "sockets",  # TCP connections of the slime processes (procfs, collect/sockets.py)
    "environ",  # allow-listed environment of the slime processes (proxies, socket interfaces)
    "kernel",  # the Linux kernel's side: D state, wchan, storage bytes, /dev/shm, OOM lines
    "request_path",  # a hop between the RolloutManager and the engines that holds the requests
]


# --------------------------------------------------------------------------- the three vocabularies
#
# A "source" has three names, each fixed by what reads it:
# - the bundle's (`SourceSpec.name` of sources.SPECS: a probe record's `source`, the folder under raw/): stored in
#   every bundle, so an old bundle loads only while these stay as they are (`nccl_ras`, `sglang`);
# - the analysis's (`Source` above): what a suspect, a piece of evidence or a progress signal came
#   from; shown to the user ("sources: ras, stacks", "[sglang] ...", the progress lines), so a
#   rename would change the reports (`ras`, not `nccl_ras`);
# - the finders' (`SuspectFinder.name` / `EvidenceFinder.name` in analysis/suspects/__init__.py):
#   internal labels, one per finder module, which may name several analysis sources (`engines`
#   and `routers` both name `sglang`; `gpu` names `nvml`; `chain` is the fallback on `stacks`).
# None is renamed to match the others; this table is where they meet (tests/unit/test_source_names.py
# checks it against all three lists, so a new source that skips a row fails there).


@dataclass(frozen=True)
class SourceNames:
    """One analysis source: the bundle sources it reads, the finders that name it."""

    analysis: Source
    bundle: tuple[str, ...]  # the sources (SourceSpec.name) it is read from
    # the suspect and evidence finders that give it as their source (`progress` turns the frozen
    # progress signals of analysis/progress.py into evidence)
    finders: tuple[str, ...] = ()


SOURCE_NAMES: tuple[SourceNames, ...] = (
    SourceNames("ras", ("nccl_ras",), ("ras", "progress")),
    SourceNames("flight_recorder", ("flight_recorder",), ("flight_recorder",)),
    SourceNames("nvml", ("nvml", "ray_dashboard"), ("gpu",)),  # and Ray's node summary
    # a CUDA kernel that never ends (analysis/cuda_spin.py), from five sources together
    SourceNames(
        "gpu_kernel",
        ("nvml", "nccl_ras", "pyspy", "flight_recorder", "processes"),
        ("gpu_kernel",),
    ),
    SourceNames("gpm", ("gpm",)),  # refines the nvml GPU state (analysis/gpu.py); no finder
    SourceNames(
        "stacks",
        ("pyspy", "dashboard_traceback"),
        ("stacks", "chain", "engines", "progress"),
    ),
    SourceNames("sglang", ("sglang", "router"), ("engines", "routers", "rollout", "progress")),
    SourceNames("rollout", ("pyspy",), ("rollout",)),  # the RolloutManager's stacks
    SourceNames("driver", ("pyspy",), ("driver",)),  # the driver's stacks
    SourceNames("ray", ("ray_dashboard",), ("ray",)),
    SourceNames("ray_tasks", ("ray_dashboard",), ("ray_tasks",)),
    SourceNames("ray_placement", ("ray_dashboard",), ("ray_placement",)),
    SourceNames("ray_plasma", ("ray_dashboard",), ("ray_plasma",)),
    SourceNames("processes", ("processes",), ("processes",)),
    SourceNames("cpu", ("processes",)),  # CPU times between the samples: progress signals only
    SourceNames("sockets", ("sockets",), ("sockets", "routers", "rollout")),
    SourceNames("environ", ("processes",), ("environ",)),  # the allow-listed environment
    SourceNames("kernel", ("kernel",), ("kernel",)),  # the Linux kernel's view of the processes
    # the request path's hops (sockets) and the one holding the requests (stacks, CPU times)
    SourceNames("request_path", ("sockets", "pyspy", "processes"), ("request_path",)),
)
# bundle sources no analysis source weighs: they explain (log findings, analysis/logs.py) or find
# (engine URLs from the actor log heads, topology.py)
NOT_WEIGHED: tuple[str, ...] = ("ray_logs", "actor_log_head")
