"""Colocated weight sync: each engine's sender gathers the serialized tensors of its gather group
(gloo `gather_object`) and calls SGLangEngine.update_weights_from_tensor (CUDA IPC in slime)."""

from __future__ import annotations

import argparse
import base64
import io
import logging
from typing import Any

from slime.observability.logging_utils import log_fault_armed
from slime.utils.distributed_utils import get_gloo_group
from slime.utils.misc import fault_armed

logger = logging.getLogger(__name__)


class UpdateWeightFromTensor:
    def __init__(self, args: argparse.Namespace, model: dict[str, Any]) -> None:
        import torch.distributed as dist

        self.args = args
        self.model = model
        self.weight_version = 0
        self.rollout_engines: list[Any] = []
        self.rollout_engine_lock: Any = None
        self._ipc_gather_src = 0
        self._ipc_gather_group: Any = None
        self._ipc_engine: Any = None
        per_engine = args.rollout_num_gpus_per_engine
        for start_rank in range(0, dist.get_world_size(), per_engine):
            group_ranks = list(range(start_rank, start_rank + per_engine))
            new_group = dist.new_group(ranks=group_ranks, backend="gloo")
            if dist.get_rank() in group_ranks:
                self._ipc_gather_src = start_rank
                self._ipc_gather_group = new_group

    def connect_rollout_engines(
        self,
        rollout_engines: list[Any],
        rollout_engine_lock: Any,
        engine_gpu_counts: list[int] | None = None,
        engine_gpu_offsets: list[int] | None = None,
        engine_parallel_configs: list[dict[str, Any]] | None = None,
    ) -> None:
        import torch.distributed as dist

        self.rollout_engines = rollout_engines
        self.rollout_engine_lock = rollout_engine_lock
        self._engine_index = dist.get_rank() // self.args.rollout_num_gpus_per_engine
        self._ipc_engine = rollout_engines[self._engine_index]

    def update_weights(self) -> None:
        import ray
        import torch.distributed as dist

        self.weight_version += 1
        rank = dist.get_rank()
        if rank == 0:
            ray.get([engine.pause_generation.remote() for engine in self.rollout_engines])
            ray.get([engine.flush_cache.remote() for engine in self.rollout_engines])
        dist.barrier(group=get_gloo_group())
        for hf_named_tensors in self._hf_weight_chunks():
            refs, _long_lived = self._send_hf_params(hf_named_tensors)
            ray.get(refs)
        dist.barrier(group=get_gloo_group())
        if rank == 0:
            ray.get([engine.continue_generation.remote() for engine in self.rollout_engines])
        dist.barrier(group=get_gloo_group())

    def _hf_weight_chunks(self) -> list[list[tuple[str, Any]]]:
        return [list(self.model.items())]

    def _send_hf_params(self, hf_named_tensors: list[tuple[str, Any]]) -> tuple[list[Any], Any]:
        step = self.weight_version - 2  # sync 1 is the initial one; sync k+2 follows step k
        skip = (
            self.args.fault == "colocate_update_hang"
            and self._engine_index == self.args.fault_engine
            and not fault_armed(self.args, self.args.fault, step)
        )
        if (
            not skip
            and self.args.fault == "colocate_update_hang"
            and self._engine_index == self.args.fault_engine
        ):
            log_fault_armed(
                logger,
                self.args.fault,
                f"update_weights_from_tensor of engine {self._engine_index}",
                step,
            )
        refs = _send_to_colocated_engine(
            hf_named_tensors,
            ipc_engine=None if skip else self._ipc_engine,
            ipc_gather_src=self._ipc_gather_src,
            ipc_gather_group=self._ipc_gather_group,
            weight_version=self.weight_version,
        )
        return refs, hf_named_tensors


def _serialize(named_tensors: list[tuple[str, Any]]) -> str:
    """Stands for MultiprocessingSerializer (CUDA IPC handles in slime): real bytes here."""
    import torch

    buf = io.BytesIO()
    torch.save({name: t.clone() for name, t in named_tensors}, buf)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _send_to_colocated_engine(
    hf_named_tensors: list[tuple[str, Any]],
    *,
    ipc_engine: Any,
    ipc_gather_src: int,
    ipc_gather_group: Any,
    weight_version: int,
) -> list[Any]:
    import torch.distributed as dist

    serialized = _serialize(hf_named_tensors)
    rank = dist.get_rank()
    gathered: list[Any] | None = (
        [None] * dist.get_world_size(ipc_gather_group) if rank == ipc_gather_src else None
    )
    dist.gather_object(serialized, gathered, dst=ipc_gather_src, group=ipc_gather_group)
    refs: list[Any] = []
    if rank == ipc_gather_src and ipc_engine is not None:
        refs.append(
            ipc_engine.update_weights_from_tensor.remote(
                serialized_named_tensors=gathered,
                load_format="flattened_bucket",
                flush_cache=False,
                weight_version=str(weight_version),
            )
        )
    return refs
