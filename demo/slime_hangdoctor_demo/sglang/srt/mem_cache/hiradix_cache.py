"""HiCache's L3 prefetch bookkeeping (as SGLang 0.5.15.post1 `sglang/srt/mem_cache/hiradix_cache.py`).

An engine run with a HiCache storage backend prefetches each new request's prefix from storage
(`prefetch_from_storage`) and, before the request is scheduled, asks whether that prefetch may end:
`check_prefetch_progress` (:1479-1530) -> `can_terminate_prefetch` (:1438-1477), which all-reduces
the ranks' states over the attention-TP group (`_all_reduce_attn_groups`, :215-222, a gloo CPU
group: with no DP attention the TP group itself). Every TP rank must make that call the same number
of times: the scheduler calls it from inside its admission loop, whose trip count depends on each
rank's own free KV slots (sglang#30760, PR#33029)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class PrefetchOperation:
    request_id: str
    completed_tokens: int = 0
    terminated: bool = False


class HiRadixCache:
    def __init__(self, tp_group: Any, attn_tp_group: Any, tp_world_size: int) -> None:
        self.tp_group = tp_group
        self.attn_tp_group = attn_tp_group
        self.attn_cp_group: Any = None
        self.tp_world_size = tp_world_size
        self.prefetch_stop_policy = "timeout"  # --hicache-storage-prefetch-policy timeout
        self.ongoing_prefetch: dict[str, PrefetchOperation] = {}

    def _all_reduce_attn_groups(self, tensor: Any, op: Any) -> None:
        import torch.distributed as dist

        reduced = False
        for group in (self.attn_cp_group, self.attn_tp_group):
            if group is not None and dist.get_world_size(group=group) > 1:
                dist.all_reduce(tensor, op=op, group=group)
                reduced = True
        if not reduced and self.tp_world_size > 1:
            dist.all_reduce(tensor, op=op, group=self.tp_group)

    def prefetch_from_storage(self, req_id: str, num_tokens: int) -> None:
        """Issue the L3 prefetch of a request's prefix (the stand-in's storage answers at once)."""
        self.ongoing_prefetch[req_id] = PrefetchOperation(req_id, completed_tokens=num_tokens)

    def can_terminate_prefetch(self, operation: PrefetchOperation) -> bool:
        import torch
        import torch.distributed as dist

        can_terminate = operation.completed_tokens > 0
        states = torch.tensor([1 - int(can_terminate), int(operation.terminated)], dtype=torch.int)
        self._all_reduce_attn_groups(states, dist.ReduceOp.MAX)
        return bool(states[0].item() == 0 or states[1].item() == 1)

    def check_prefetch_progress(self, req_id: str) -> bool:
        operation = self.ongoing_prefetch.get(req_id)
        if operation is None:
            # there is no ongoing prefetch for this request or it has been revoked
            return True
        if not self.can_terminate_prefetch(operation):
            return False
        operation.terminated = True
        del self.ongoing_prefetch[req_id]
        return True

    def terminate_prefetch(self, req_id: str) -> None:
        self.ongoing_prefetch.pop(req_id, None)
