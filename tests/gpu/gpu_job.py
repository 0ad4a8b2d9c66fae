"""A slime-shaped Ray job on two GPUs: the driver of the GPU test programs (tests/gpu/).

`python3 gpu_job.py PROGRAM --ready FILE [--backend nccl|gloo] [--port N]` creates two
`MegatronTrainRayActor` actors (one GPU each, named as slime names its train actors), joins them in a
torch.distributed process group, warms the communicator up with one all_reduce, writes FILE (JSON:
each rank's pid and GPU ids) and then runs PROGRAM:

- `broadcast-hang`: rank 0 broadcasts a `--bucket-mib` weight bucket (default 1024) along slime's
  weight-sync path (`update_weights` -> `_update_bucket_weights_from_distributed` ->
  `update_weights_from_distributed` -> `dist.broadcast`); rank 1 never joins (it waits in Python for
  rollout data that never comes). Seen on 2x H200 (NCCL 2.28.9, NVLink): a 64 MiB broadcast
  COMPLETES on the root without the receiver (rank 0 returns, only rank 1's update_weights hangs);
  1 GiB blocks the root in the broadcast, as slime's trainer blocks when an engine never joins.
- `train-stuck`: an all_reduce inside a train step (`train` -> `train_one_step`); rank 1 is stuck in
  a pure-Python loop in `process_rollout_data` (it burns a core and never reaches the collective).
- `rank-killed`: both ranks loop on train steps with an all_reduce; the test kills rank 1 with
  SIGKILL mid-collective. The driver waits for its ranks one by one (rank 0 first), so it stays alive
  while rank 0 waits forever for the dead peer.
- `allreduce-busy`: a healthy loop of train steps with an all_reduce (both ranks).
- `matmul-healthy`: a healthy bf16 matmul loop on both GPUs, no collective.

Every loop records its progress in `/dev/shm/hd-progress-<tag>-rank<r>` (an int64 counter and a ring
of the last iterations' `time.monotonic()`), so a benchmark can see what a probe costs the rank.
The NVLink-multicast switches stay off (NCCL_NVLS_ENABLE=0 ...) in every process.
`--backend gloo` runs the same shapes on CPU (for developing the harness without a GPU).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import ray

PROGRAMS = ("broadcast-hang", "train-stuck", "rank-killed", "allreduce-busy", "matmul-healthy")
WORLD = 2
RING = 8192
SAFE_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


def progress_path(tag: str, rank: int) -> str:
    return f"/dev/shm/hd-progress-{tag}-rank{rank}"


class Progress:
    """An int64 counter plus a ring of iteration times, shared through a file in /dev/shm."""

    def __init__(self, path: str) -> None:
        import numpy as np

        self.mem = np.memmap(path, dtype=np.float64, mode="w+", shape=(RING + 1,))
        self.i = 0

    def tick(self) -> None:
        self.i += 1
        self.mem[1 + self.i % RING] = time.monotonic()
        self.mem[0] = self.i


# --------------------------------------------------------------------------- weight sync (slime names)


def update_weights_from_distributed(group: Any, tensor: Any) -> None:
    """slime: broadcast one bucket from train rank 0 to whoever joined the weight-update group."""
    import torch
    import torch.distributed as dist

    dist.broadcast(tensor, src=0, group=group)
    if tensor.is_cuda:
        torch.cuda.synchronize()


class UpdateWeightFromDistributed:
    def __init__(self, device: str) -> None:
        self.device = device
        self.weight_version = 0

    def update_weights(self, bucket_mib: int) -> None:
        import torch

        self.weight_version += 1
        bucket = torch.ones(bucket_mib * 256 * 1024, device=self.device)  # fp32
        for named_tensors in (bucket,):
            self._update_bucket_weights_from_distributed(named_tensors)

    def _update_bucket_weights_from_distributed(self, bucket: Any) -> None:
        update_weights_from_distributed(None, bucket)


# --------------------------------------------------------------------------- train step (slime names)


def train_one_step(grads: Any, progress: Progress | None) -> None:
    """One step's data-parallel gradient all_reduce."""
    import torch
    import torch.distributed as dist

    dist.all_reduce(grads)
    if grads.is_cuda:
        torch.cuda.synchronize()
    if progress is not None:
        progress.tick()


def forward_backward(weights: Any, progress: Progress | None) -> Any:
    """A compute-bound step: bf16 matmuls, no collective."""
    import torch

    for _ in range(8):
        weights = (weights @ weights).clamp_(-1, 1)
    if weights.is_cuda:
        torch.cuda.synchronize()
    if progress is not None:
        progress.tick()
    return weights


def process_rollout_data(rollout_id: int) -> int:
    """Rank 1 of train-stuck: a data-processing bug that never ends (pure Python, one core busy)."""
    total = 0
    while True:
        total = (total + sum(i * i for i in range(2000)) + rollout_id) % 1000003


def wait_for_rollout() -> None:
    """Rank 1 of broadcast-hang: waits in Python for a rollout that never comes."""
    while True:
        time.sleep(0.5)


class MegatronTrainRayActor:
    def init(self, rank: int, port: int, backend: str, tag: str) -> dict[str, Any]:
        from datetime import timedelta

        import torch
        import torch.distributed as dist

        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        self.rank = rank
        self.tag = tag
        self.cuda = backend == "nccl"
        kwargs: dict[str, Any] = {}
        if self.cuda:
            torch.cuda.set_device(0)
            kwargs["device_id"] = torch.device("cuda", 0)
        dist.init_process_group(
            backend, rank=rank, world_size=WORLD, timeout=timedelta(seconds=3600), **kwargs
        )
        device = "cuda" if self.cuda else "cpu"
        self.grads = torch.ones(16 * 1024 * 1024, device=device)  # 64 MiB fp32
        self.weights = torch.randn(
            8192 if self.cuda else 256,
            8192 if self.cuda else 256,
            device=device,
            dtype=torch.bfloat16 if self.cuda else torch.float32,
        )
        dist.all_reduce(self.grads)  # the communicator is live
        if self.cuda:
            torch.cuda.synchronize()
        self.weight_updater = UpdateWeightFromDistributed(device)
        gpu: dict[str, Any] = {}
        if self.cuda:
            props = torch.cuda.get_device_properties(0)
            gpu = {"name": props.name, "pci_bus_id": getattr(props, "pci_bus_id", None)}
        return {
            "rank": rank,
            "pid": os.getpid(),
            "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "gpu": gpu,
        }

    def update_weights(self, program: str, bucket_mib: int) -> None:
        if self.rank != 0:
            wait_for_rollout()
        self.weight_updater.update_weights(bucket_mib)

    def train(self, program: str) -> None:
        progress = Progress(progress_path(self.tag, self.rank))
        rollout_id = 0
        while True:
            rollout_id += 1
            if program == "train-stuck" and self.rank == 1:
                process_rollout_data(rollout_id)
            if program == "matmul-healthy":
                self.weights = forward_backward(self.weights, progress)
            else:
                train_one_step(self.grads, progress)
            if program == "train-stuck":
                return  # rank 0 finishes the step only if rank 1 ever joins


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("program", choices=PROGRAMS)
    ap.add_argument("--ready", required=True)
    ap.add_argument("--backend", default="nccl", choices=("nccl", "gloo"))
    ap.add_argument("--port", type=int, default=29710)
    ap.add_argument("--tag", default="")
    ap.add_argument("--fr-dir", default="/tmp")
    ap.add_argument("--bucket-mib", type=int, default=1024, help="broadcast-hang's bucket size")
    args = ap.parse_args(argv)
    tag = args.tag or args.program
    ray.init(address="auto")
    gpus = 1 if args.backend == "nccl" else 0
    actor_cls = ray.remote(MegatronTrainRayActor)
    actors = []
    for rank in range(WORLD):
        env = {
            **SAFE_ENV,
            "RANK": str(rank),
            "LOCAL_RANK": "0",
            "WORLD_SIZE": str(WORLD),
            "MASTER_PORT": str(args.port),
            "TORCH_FR_BUFFER_SIZE": "2000",
            "TORCH_NCCL_ENABLE_TIMING": "1",
            "TORCH_FR_DUMP_TEMP_FILE": f"{args.fr_dir}/hd-fr-{tag}-rank_",
            "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": f"{args.fr_dir}/hd-frpipe-{tag}-",
            "PYTHONUNBUFFERED": "1",
        }
        actors.append(
            actor_cls.options(num_gpus=gpus, num_cpus=0, runtime_env={"env_vars": env}).remote()
        )
    info = ray.get(
        [a.init.remote(r, args.port, args.backend, tag) for r, a in enumerate(actors)],
        timeout=300,
    )
    print("ranks", json.dumps(info), flush=True)
    tmp = args.ready + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump({"program": args.program, "ranks": info, "driver_pid": os.getpid()}, fh)
    os.replace(tmp, args.ready)
    if args.program == "broadcast-hang":
        refs = [a.update_weights.remote(args.program, args.bucket_mib) for a in actors]
    else:
        refs = [a.train.remote(args.program) for a in actors]
    for ref in refs:  # one by one, rank 0 first: a dead rank 1 does not end the driver
        ray.get(ref)
    return 0


if __name__ == "__main__":
    sys.exit(main())
