"""`save_checkpoint` as megatron/training/checkpointing.py (torch_dist format, not fully parallel).

Every rank saves its part of the state, then all ranks wait in a barrier ("Wait so everyone is done
(necessary)") before rank 0 writes the tracker file `latest_checkpointed_iteration.txt`. Without
`--ckpt-fully-parallel-save`, a tensor replicated across data-parallel ranks is written by its main
replica, the first data-parallel rank: with pure data parallelism (the demo: 2 ranks, DP=2) rank 0
writes the whole checkpoint while the other ranks wait in that barrier.

The demo fault `checkpoint_slow_storage` stands in for a slow file system under `--save` (an
overloaded NFS / Lustre / object-store mount): each 64 KiB block is acknowledged only after a pause,
so the write moves on steadily but never finishes while the doctor looks. The demo's state is small,
so the slow write cycles through one bounded shard file (disk use stays at SLOW_SHARD_BYTES) and
fsyncs every block: the bytes really reach the disk and count in `/proc/<pid>/io` write_bytes.
`checkpoint_stuck_storage` streams the shard to an uploader that stopped reading: the write never
returns and no byte moves. `checkpoint_writer_deadlock` hands the shard to an asynchronous writer
process forked from the rank (multiprocessing, fork start method) while another thread of the rank
holds the writer's lock: the child inherits the lock held, with no thread to release it, and
waits on it for good; the rank waits for its writer. `checkpoint_plan_gather_stuck` saves with
`--async-save` through dist_checkpointing, whose plan gather every rank then waits in.
"""

from __future__ import annotations

import io
import logging
import multiprocessing
import os
import subprocess
import threading
import time
from typing import Any

# Megatron imports dist_checkpointing (and with it torch.distributed.checkpoint) when the training
# module loads, at the rank's start-up (megatron/training/checkpointing.py: `from ..core import
# dist_checkpointing`), not at the first save: a save's first moments read no module from disk.
from megatron.core.dist_checkpointing import serialization
from megatron.core.dist_checkpointing.strategies.torch import TorchDistSaveShardedStrategy
from megatron.training.global_vars import get_args

logger = logging.getLogger(__name__)

SLOW_BLOCK_BYTES = 64 * 1024
SLOW_SHARD_BYTES = 4 * 1024 * 1024
_SHARD_LOCK = threading.Lock()  # the writer's lock: one shard write at a time
SLOW_BLOCK_PAUSE_S = 0.05  # ~1.2 MiB/s: slow, but far above the doctor's 1 MiB per window


def get_checkpoint_name(checkpoints_path: str, iteration: int) -> str:
    return os.path.join(checkpoints_path, f"iter_{iteration:07d}")


def get_checkpoint_tracker_filename(checkpoints_path: str) -> str:
    return os.path.join(checkpoints_path, "latest_checkpointed_iteration.txt")


def ensure_directory_exists(path: str) -> None:
    os.makedirs(path, exist_ok=True)


def save_checkpoint(
    iteration: int,
    model: list[Any],
    optimizer: Any,
    opt_param_scheduler: Any,
    num_floating_point_operations_so_far: int,
    checkpointing_context: dict[str, Any] | None = None,
) -> None:
    import torch
    import torch.distributed as dist

    args = get_args()
    rank = dist.get_rank()
    checkpoint_name = get_checkpoint_name(args.save, iteration)
    if getattr(args, "async_save", False):
        _save_torch_dist(checkpoint_name, model, optimizer, iteration, rank, args)
    elif rank == 0:
        logger.info(
            f"saving checkpoint at iteration {iteration:7d} to {args.save} in torch_dist format"
        )
        ensure_directory_exists(checkpoint_name)
        state_dict = {
            "iteration": iteration,
            "model": model[0],
            "optimizer": optimizer,
            "opt_param_scheduler": opt_param_scheduler,
            "num_floating_point_operations_so_far": num_floating_point_operations_so_far,
        }
        buf = io.BytesIO()
        torch.save(state_dict, buf)
        shard = os.path.join(checkpoint_name, "__0_0.distcp")
        if getattr(args, "writer_deadlock", False):
            _save_shard_in_forked_writer(shard, buf.getvalue())
        elif getattr(args, "stuck_storage", False):
            _stream_shard_to_uploader(buf.getvalue())
        elif getattr(args, "slow_storage", False):
            _write_shard_to_slow_storage(shard, buf.getvalue())
        else:
            with open(shard, "wb") as fh:
                fh.write(buf.getvalue())
    # Wait so everyone is done (necessary)
    dist.barrier()
    if rank == 0:
        with open(get_checkpoint_tracker_filename(args.save), "w") as fh:
            fh.write(str(iteration))
        logger.info(f"  successfully saved checkpoint from iteration {iteration:7d} to {args.save}")
    # Wait so everyone is done (not necessary)
    dist.barrier()


def _save_torch_dist(
    checkpoint_name: str, model: list[Any], optimizer: Any, iteration: int, rank: int, args: Any
) -> None:
    """`--async-save`: every rank goes through dist_checkpointing's save, which plans the save
    across ranks before writing (the save's process group: the train ranks' gloo group). The demo
    fault `checkpoint_plan_gather_stuck` gives each rank its own coordinator, as a save group whose
    layout differs between ranks would: each rank then waits, as the coordinator, for the others'
    plans in the same `gather_object`, and no rank is anywhere else (THUDM/slime#1908's stack)."""
    from slime.utils.distributed_utils import get_gloo_group

    if rank == 0:
        logger.info(f"saving checkpoint at iteration {iteration:7d} to {args.save} (async save)")
    ensure_directory_exists(checkpoint_name)
    coordinator = rank if getattr(args, "plan_coordinator_mismatch", False) else 0
    strategy = TorchDistSaveShardedStrategy(get_gloo_group(), coordinator_rank=coordinator)
    sharded_state_dict = {"model": model[0], "optimizer": optimizer, "iteration": iteration}
    serialization.save(sharded_state_dict, checkpoint_name, strategy)


def _write_shard_to_slow_storage(path: str, payload: bytes) -> None:
    """The demo's slow storage (see the module docstring): blocks of the shard, each fsync'd and
    acknowledged after a pause, cycling through one bounded file; it does not finish."""
    block = (payload * (SLOW_BLOCK_BYTES // max(1, len(payload)) + 1))[:SLOW_BLOCK_BYTES]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        offset = 0
        deadline = time.monotonic() + 10**9
        while time.monotonic() < deadline:
            _write_block(fd, block, offset)
            offset = (offset + SLOW_BLOCK_BYTES) % SLOW_SHARD_BYTES
    finally:
        os.close(fd)


def _write_block(fd: int, block: bytes, offset: int) -> None:
    os.pwrite(fd, block, offset)
    os.fsync(fd)
    time.sleep(SLOW_BLOCK_PAUSE_S)  # the storage's latency


def _stream_shard_to_uploader(payload: bytes) -> None:
    """The demo's stuck storage (`checkpoint_stuck_storage`): the shard is streamed to an uploader
    process, as `torch.save(state, proc.stdin)` into `aws s3 cp - s3://...` would be, and the
    uploader stopped reading (its connection hangs; here a `sleep` that never reads). Once the pipe
    holds 64 KiB the write sleeps in the kernel (wchan pipe_write, anon_pipe_write on Linux >= 6.14)
    with no byte moving, for good."""
    uploader = subprocess.Popen(["sleep", "infinity"], stdin=subprocess.PIPE)
    assert uploader.stdin is not None
    block = (payload * ((1 << 20) // max(1, len(payload)) + 1))[: 1 << 20]
    while True:
        uploader.stdin.write(block)


def _save_shard_in_forked_writer(path: str, payload: bytes) -> None:
    """The demo's writer deadlock (`checkpoint_writer_deadlock`): the shard goes to a writer process
    forked from the rank, as an asynchronous checkpoint writer is, and the rank waits for it before
    the barrier. Another thread of the rank (here one recording the save's metadata) holds the
    writer's lock at the moment of the fork: the child gets a copy of the lock, held, and no thread
    of its own to release it (the classic fork-with-threads deadlock). The child keeps the rank's
    Ray process title and environment; it waits in the lock forever, and so does the rank in
    `join`."""
    held, forked = threading.Event(), threading.Event()

    def record_metadata() -> None:
        with _SHARD_LOCK:
            held.set()
            forked.wait(timeout=60.0)

    threading.Thread(target=record_metadata, name="ckpt-metadata", daemon=True).start()
    held.wait(timeout=60.0)
    writer = multiprocessing.get_context("fork").Process(
        target=_write_shard_locked, args=(path, payload), name="ckpt-writer", daemon=True
    )
    writer.start()
    forked.set()
    writer.join()


def _write_shard_locked(path: str, payload: bytes) -> None:
    with _SHARD_LOCK, open(path, "wb") as fh:
        fh.write(payload)
