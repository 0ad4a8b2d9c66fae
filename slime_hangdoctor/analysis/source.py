"""The names of the evidence sources the analysis weighs against each other.

Typed, so that a misspelt source is a type error rather than a source that silently never counts.
A new source adds its name here (and, where it shows progress, to `analysis/progress.py`)."""

from __future__ import annotations

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
    "kernel",  # kernel-side state: D state, wchan, storage bytes, /dev/shm, OOM lines
]
