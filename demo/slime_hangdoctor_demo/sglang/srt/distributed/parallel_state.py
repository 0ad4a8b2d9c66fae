"""The TP group of one engine's scheduler ranks (as `sglang/srt/distributed/parallel_state.py`).

SGLang 0.5.15.post1 creates, per engine, a default process group over its TP ranks
(`init_distributed_environment`) and a `GroupCoordinator` for the TP group holding a device group
(NCCL) and a CPU group (gloo, `cpu_group`), the one `broadcast_pyobj` and HiCache's checks use. With
no DP attention the attention-TP group IS the TP group (`parallel_state.py:2179-2180`,
`_ATTN_TP = _TP`). The stand-in has no GPU: both groups are real gloo groups over 127.0.0.1, so a
rank that waits for another one waits in a real collective."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

_TP: GroupCoordinator | None = None


class GroupCoordinator:
    """One group of ranks with its device group and its CPU group."""

    def __init__(self, rank: int, world_size: int, device_group: Any, cpu_group: Any) -> None:
        self.rank = rank
        self.rank_in_group = rank
        self.world_size = world_size
        self.ranks = list(range(world_size))
        self.device_group = device_group
        self.cpu_group = cpu_group

    def all_reduce(self, input_: Any) -> Any:
        """`GroupCoordinator.all_reduce` (parallel_state.py:579): a no-op for one rank, else the
        collective on the device group. NCCL returns to the CPU at once and the wait happens when
        the batch's result is copied back (`copy_done`); the stand-in posts the gloo collective
        with `async_op=True` and returns its handle, which the scheduler waits on when it processes
        the batch's result."""
        if self.world_size == 1:
            return None
        import torch.distributed as dist

        return dist.all_reduce(input_, group=self.device_group, async_op=True)


def init_distributed_environment(
    world_size: int, rank: int, distributed_init_method: str, timeout_s: float
) -> None:
    """The default group over the engine's TP ranks (rendezvous on `distributed_init_method`)."""
    import torch.distributed as dist

    dist.init_process_group(
        backend="gloo",
        init_method=distributed_init_method,
        world_size=world_size,
        rank=rank,
        timeout=timedelta(seconds=timeout_s),
    )


def initialize_model_parallel(tensor_model_parallel_size: int) -> None:
    """The TP group: a device group and a gloo CPU group (`new_group(backend="gloo")`)."""
    import torch.distributed as dist

    global _TP
    ranks = list(range(tensor_model_parallel_size))
    device_group = dist.new_group(ranks, backend="gloo")
    cpu_group = dist.new_group(ranks, backend="gloo")
    _TP = GroupCoordinator(dist.get_rank(), tensor_model_parallel_size, device_group, cpu_group)


def get_tp_group() -> GroupCoordinator:
    assert _TP is not None, "tensor model parallel group is not initialized"
    return _TP


def get_attention_tp_group() -> GroupCoordinator:
    """No DP attention: the attention-TP group is the TP group (parallel_state.py:2179-2180)."""
    return get_tp_group()


def model_parallel_is_initialized() -> bool:
    return _TP is not None
