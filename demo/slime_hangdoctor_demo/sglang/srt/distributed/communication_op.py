"""`tensor_model_parallel_all_reduce` (as `sglang/srt/distributed/communication_op.py:18-20`)."""

from __future__ import annotations

from typing import Any

from slime_hangdoctor_demo.sglang.srt.distributed.parallel_state import get_tp_group


def tensor_model_parallel_all_reduce(input_: Any) -> Any:
    """All-reduce the input tensor across the TP group (the row-parallel layers of every forward)."""
    return get_tp_group().all_reduce(input_)
