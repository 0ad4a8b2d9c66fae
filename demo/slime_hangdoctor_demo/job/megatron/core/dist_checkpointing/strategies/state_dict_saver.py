"""`save_state_dict_async_plan` as megatron/core/dist_checkpointing/strategies/state_dict_saver.py:
each rank makes its local save plan, the coordinator gathers every rank's plan (torch DCP's
`_DistWrapper.gather_object`, a `gather_object` over the save's process group), dedups the items
replicated across ranks into the central plan, and broadcasts it back. Every rank of the group must
enter the gather with the same coordinator: a rank that never enters it, or one that waits for a
different coordinator, leaves all the others waiting in `gather_object` (THUDM/slime#1908)."""

from __future__ import annotations

from typing import Any

from torch.distributed.checkpoint.utils import _DistWrapper


def save_state_dict_async_plan(
    state_dict: dict[str, Any],
    checkpoint_dir: str,
    process_group: Any = None,
    coordinator_rank: int = 0,
) -> dict[int, list[str]]:
    dist_wrapper = _DistWrapper(process_group, True, coordinator_rank)
    local_plan = (dist_wrapper.rank, sorted(state_dict))
    all_local_plans = dist_wrapper.gather_object(local_plan)
    central_plan: dict[int, list[str]] | None = None
    if dist_wrapper.is_coordinator:
        assert all_local_plans is not None
        central_plan, seen = {}, set()
        for rank, items in sorted(all_local_plans):
            central_plan[rank] = [i for i in items if i not in seen]
            seen.update(items)
    result: dict[int, list[str]] = dist_wrapper.broadcast_object(central_plan)
    return result
