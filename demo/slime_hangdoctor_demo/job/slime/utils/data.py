"""Trainer-side data fetch, as slime/utils/data.py:process_rollout_data."""

from __future__ import annotations

import argparse
import logging
import time
from typing import Any

from slime.observability.logging_utils import log_fault_armed
from slime.utils.misc import Box, fault_armed

logger = logging.getLogger(__name__)


def process_rollout_data(
    args: argparse.Namespace, rollout_data_ref: list[Box], dp_rank: int, dp_size: int
) -> dict[str, Any]:
    import ray

    assert len(rollout_data_ref) == dp_size
    rollout_data: dict[str, Any] = ray.get(rollout_data_ref[dp_rank].inner)
    partition = rollout_data.pop("partition")
    total_lengths = rollout_data["total_lengths"]
    rollout_id = int(rollout_data.get("rollout_id", -1))
    if dp_rank == args.fault_rank and fault_armed(args, "train_rank_stuck", rollout_id):
        log_fault_armed(
            logger, args.fault, f"process_rollout_data on train rank {dp_rank}", rollout_id
        )
        _repack_partition(partition, total_lengths)
    rollout_data["total_lengths"] = [total_lengths[i] for i in range(len(partition))]
    return rollout_data


def _repack_partition(partition: list[int], total_lengths: list[int]) -> None:
    """Injected fault (`train_rank_stuck`): a CPU-hot pure-Python loop that never converges,
    so this rank never reaches the step's all_reduce."""
    balance = 0
    deadline = time.monotonic() + 10**9
    while time.monotonic() < deadline:
        for i in partition:
            balance = (balance + total_lengths[i % len(total_lengths)] * 31) % 1000003
