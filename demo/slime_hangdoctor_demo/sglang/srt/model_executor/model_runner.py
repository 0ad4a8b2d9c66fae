"""The stand-in ModelRunner: forward passes (sleeps), weights, the weight-update groups.

As `sglang/srt/model_executor/model_runner.py`. torch is imported only for the weight-update group."""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any

from slime_hangdoctor_demo.sglang.srt.managers.schedule_batch import ScheduleBatch
from slime_hangdoctor_demo.sglang.srt.utils.common import (
    DEFAULT_PG_TIMEOUT_S,
    init_custom_process_group,
)

Msg = dict[str, Any]

logger = logging.getLogger("sglang_standin.scheduler")


def next_token(rid: str, position: int) -> tuple[int, float]:
    digest = int(hashlib.sha256(f"{rid}:{position}".encode()).hexdigest()[:8], 16)
    return 100 + digest % 30000, -0.05 - (digest % 97) / 100.0


def torch_dtype(name: str) -> Any:
    import torch

    dtype = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}")
    return dtype


def _block_forever(reason: str, armed: Callable[[], bool] | None = None) -> None:
    """Sleep forever in small steps (a stand-in for a CUDA sync or collective that never ends).
    Demo only: with `armed`, the wait ends once it says the fault is no longer armed (an arm file
    removed: benchmarks/bench_soak.py arms and clears a fault in turns on a running job); a run
    that never removes the file never sees it end, as a real stuck sync."""
    logger.debug("blocking forever: %s", reason)
    while armed is None or armed():
        time.sleep(1.0)


class ModelRunner:
    """Holds the "weights" and the weight-update process groups (names follow SGLang's ModelRunner)."""

    def __init__(self, cfg: Msg) -> None:
        self.cfg = cfg
        self.step_s = float(cfg.get("step_s", 0.02))
        self.groups: dict[str, Any] = {}
        self.weights: dict[str, tuple[list[int], float]] = {}  # name -> (shape, checksum)
        self.fault_active: Callable[[str], bool] = lambda name: False
        self.tp_rank = int(cfg.get("tp_rank", 0))
        self.tp_size = max(int(cfg.get("tp_size", 1)), 1)
        # the handle of the last forward's TP all-reduce (tp_size > 1), waited on by the scheduler
        self.copy_done: Any = None

    # ---- forward
    def forward(self, batch: ScheduleBatch) -> list[tuple[int, float]]:
        if batch.mode == "prefill":
            return self.forward_extend(batch)
        return self.forward_decode(batch)

    def forward_extend(self, batch: ScheduleBatch) -> list[tuple[int, float]]:
        if self.fault_active("stuck_prefill"):
            logger.debug("fault stuck_prefill: forward never returns")
            self._synchronize()
        time.sleep(self.step_s)
        self._all_reduce_hidden_states(len(batch.reqs))
        return [next_token(r.rid, len(r.output_ids)) for r in batch.reqs]

    def forward_decode(self, batch: ScheduleBatch) -> list[tuple[int, float]]:
        if self.fault_active("stuck_scheduler"):
            logger.debug("fault stuck_scheduler: forward never returns")
            self._synchronize(armed=lambda: self.fault_active("stuck_scheduler"))
        if self.tp_rank == self.tp_size - 1 > 0 and self.fault_active("tp_rank_stuck"):
            # fault tp_rank_stuck: this rank alone never gets past its forward, so it never posts
            # the all_reduce below, which its peers have posted and wait for
            logger.debug("fault tp_rank_stuck: the last TP rank's forward never returns")
            self._synchronize()
        time.sleep(self.step_s)
        self._all_reduce_hidden_states(len(batch.reqs))
        return [next_token(r.rid, len(r.output_ids)) for r in batch.reqs]

    def _all_reduce_hidden_states(self, num_tokens: int) -> None:
        """The row-parallel layers' all-reduce of every forward over the TP ranks (one real gloo
        collective per batch here; NCCL in SGLang, `tensor_model_parallel_all_reduce`)."""
        if self.tp_size == 1:
            return
        import torch

        from slime_hangdoctor_demo.sglang.srt.distributed.communication_op import (
            tensor_model_parallel_all_reduce,
        )

        self.copy_done = tensor_model_parallel_all_reduce(torch.ones(max(num_tokens, 1)))

    def _synchronize(self, armed: Callable[[], bool] | None = None) -> None:
        _block_forever("copy_done.synchronize() of a batch that never finishes", armed)

    # ---- weight-update group
    def init_weights_update_group(self, req: Msg) -> tuple[bool, str]:
        address = str(req.get("master_address", "127.0.0.1"))
        port = int(req.get("master_port", 0))
        rank = int(req.get("rank_offset", 1)) + self.tp_rank  # model_runner: rank_offset + tp_rank
        world_size = int(req.get("world_size", 2))
        group_name = str(req.get("group_name", "weight_update_group"))
        requested = str(req.get("backend", "nccl"))
        logger.info(
            "init custom process group: master_address=%s, master_port=%s, rank_offset=%s, "
            "rank=%s, world_size=%s, group_name=%s, backend=%s",
            address,
            port,
            req.get("rank_offset"),
            rank,
            world_size,
            group_name,
            requested,
        )
        if address in ("127.0.0.1", "localhost"):
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        if self.fault_active("skip_weight_sync"):
            port = _closed_port()  # never reaches the trainer's store: as with a wrong port / IB
        timeout = timedelta(
            seconds=float(self.cfg.get("weight_sync_timeout_s", DEFAULT_PG_TIMEOUT_S))
        )
        try:
            self.groups[group_name] = init_custom_process_group(
                backend="gloo",  # no GPU in the stand-in: nccl is served by gloo
                init_method=f"tcp://{address}:{port}",
                world_size=world_size,
                rank=rank,
                group_name=group_name,
                timeout=timeout,
            )
        except Exception as exc:
            message = f"Failed to initialize custom process group: {exc}."
            logger.error(message)
            return False, message
        return True, "Succeeded to initialize custom process group."

    def destroy_weights_update_group(self, group_name: str) -> tuple[bool, str]:
        pg = self.groups.pop(group_name, None)
        if pg is None:
            return False, "The group to be destroyed does not exist."
        import torch.distributed as dist

        try:
            dist.destroy_process_group(pg)
        except Exception as exc:
            return False, f"Failed to destroy custom process group: {exc}."
        return True, "Succeeded to destroy custom process group."

    def update_weights_from_distributed(self, req: Msg) -> tuple[bool, str]:
        names = [str(n) for n in req.get("names") or []]
        dtypes = [str(d) for d in req.get("dtypes") or []]
        shapes = [list(map(int, s)) for s in req.get("shapes") or []]
        group_name = str(req.get("group_name", "weight_update_group"))
        if not (len(names) == len(dtypes) == len(shapes)):
            return False, "names, dtypes and shapes must have the same length"
        pg = self.groups.get(group_name)
        if pg is None:
            return False, f"Group {group_name} not in {list(self.groups)}"
        if self.fault_active("skip_weight_sync"):
            self._wait_for_weights()
        if self.fault_active("stuck_before_weight_broadcast"):
            self._synchronize()
        if req.get("load_format") == "flattened_bucket":
            return self._update_bucketed_weights_from_distributed(names, dtypes, shapes, pg)
        # SGLang 0.5.15.post1 sglang/srt/model_executor/model_runner.py:2095-2113: post every
        # broadcast with async_op=True, then wait on each handle in this same frame. Work.wait() is
        # native (gloo here, NCCL on GPUs): py-spy shows this function as the innermost Python frame
        # of a scheduler that waits in the broadcast, with no `broadcast` frame.
        import torch
        import torch.distributed as dist

        try:
            received: list[tuple[str, Any]] = []
            handles = []
            for name, dtype, shape in zip(names, dtypes, shapes, strict=False):
                weight = torch.empty(shape, dtype=torch_dtype(dtype))
                handles.append(dist.broadcast(weight, src=0, group=pg, async_op=True))
                received.append((name, weight))
            for handle in handles:
                handle.wait()
        except Exception as exc:
            return False, _partial_update_message(exc)
        self.load_weights(received)
        return True, "Succeeded to update parameter online."

    def _wait_for_weights(self) -> None:
        _block_forever("weights that are never broadcast (the engine skipped the sync)")

    def _update_bucketed_weights_from_distributed(
        self, names: list[str], dtypes: list[str], shapes: list[list[int]], pg: Any
    ) -> tuple[bool, str]:
        """`flattened_bucket`: one synchronous broadcast of all tensors flattened (dtype of the
        first), as model_runner.py:2127-2156 of SGLang 0.5.15.post1."""
        import math

        import torch
        import torch.distributed as dist

        try:
            sizes = [math.prod(s) for s in shapes]
            flat = torch.empty(sum(sizes), dtype=torch_dtype(dtypes[0] if dtypes else "float32"))
            dist.broadcast(flat, src=0, group=pg)
            out: list[tuple[str, Any]] = []
            offset = 0
            for name, size, shape in zip(names, sizes, shapes, strict=False):
                out.append((name, flat[offset : offset + size].view(shape)))
                offset += size
        except Exception as exc:
            return False, _partial_update_message(exc)
        self.load_weights(out)
        return True, "Succeeded to update parameter online."

    def update_weights_from_disk(
        self, model_path: str, load_format: str | None
    ) -> tuple[bool, str]:
        """SGLang 0.5.15.post1 model_runner.py:1876-1910: a DefaultModelLoader's weights iterator
        over the checkpoint at `model_path` ("Failed to get weights iterator: ..." when there is
        none), consumed by the model's load_weights, which is where the files are read. Fault
        `slow_weight_storage`: this engine's host sees the shared directory through a slow mount
        (weight_utils.slow_host_mount): each read waits in the kernel for the storage's bytes."""
        from slime_hangdoctor_demo.sglang.srt.model_loader.loader import DefaultModelLoader
        from slime_hangdoctor_demo.sglang.srt.model_loader.weight_utils import slow_host_mount

        if self.fault_active("slow_weight_storage"):
            logger.debug("fault slow_weight_storage: reading %s from slow storage", model_path)
            model_path = slow_host_mount(model_path)
        loader = DefaultModelLoader()

        def get_weight_iter() -> Iterable[tuple[str, str]]:
            return loader._get_weights_iterator(model_path)

        def model_load_weights(weights: Iterable[tuple[str, str]]) -> None:
            loader.load_weights_and_postprocess(self.load_file_digests, weights)

        try:
            weights = get_weight_iter()
        except Exception as exc:
            return False, f"Failed to get weights iterator: {exc}."
        try:
            model_load_weights(weights)
        except Exception as exc:
            return False, f"Failed to update weights: {exc}.\nRolling back to original weights."
        self.cfg["model_path"] = model_path
        self.cfg["load_format"] = load_format
        return True, "Succeeded to update model weights."

    def load_file_digests(self, named: Iterable[tuple[str, str]]) -> None:
        for name, digest in named:
            self.weights[name] = ([], float(int(digest, 16) % 1000))

    def load_weights(self, named: Iterable[tuple[str, Any]]) -> None:
        for name, tensor in named:
            self.weights[name] = (list(tensor.shape), float(tensor.float().sum()))

    def update_weights_from_tensor(self, req: Msg) -> tuple[bool, str]:
        tensors = req.get("serialized_named_tensors") or []
        if not isinstance(tensors, list):
            return False, "serialized_named_tensors must be a list"
        if self.fault_active("hang_update_weights_from_tensor"):
            self._barrier_tp_cpu_group()
        time.sleep(self.step_s)  # open the IPC handles and copy
        for i, item in enumerate(tensors):
            self.weights[f"tensor_bucket_{i}"] = ([len(str(item))], 0.0)
        return True, "Succeeded to update model weights."

    def begin_weight_update(self) -> None:
        """0.5.23's runner side of `/begin_weight_update` (model_executor/model_runner_components/
        weight_updater.py:312-315, `DefaultModelLoader.restore_weights_before_loading` on the
        model's device): the packed weights restored so that new ones can load. Fault
        `stuck_begin_weight_update`: the restore never returns (a device copy or sync that never
        ends), so the scheduler never reaches its TP barrier nor answers."""
        if self.fault_active("stuck_begin_weight_update"):
            _block_forever("restore_weights_before_loading that never returns")
        time.sleep(self.step_s)

    def end_weight_update(self, *, run_post_load: bool) -> None:
        """0.5.23's runner side of `/end_weight_update` (weight_updater.py:317-323):
        `post_load_weights` when no load ran in the session, then the packed weights' post-process."""
        time.sleep(self.step_s)

    def _barrier_tp_cpu_group(self) -> None:
        _block_forever("torch.distributed.barrier(tp_cpu_group) that a peer never reaches")


def _partial_update_message(exc: Exception) -> str:
    return (
        f"Failed to update parameter online: {exc}. The full weights of the ModelRunner are "
        "partially updated. Please discard the whole weights."
    )


def _closed_port() -> int:
    """A loopback port that nothing listens on (bound, then released)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
