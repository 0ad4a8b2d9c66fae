"""Trainer-side data fetch of the FSDP backend, as slime/backends/training_utils/data.py."""

from __future__ import annotations

import argparse
from typing import Any

from slime.utils.misc import Box


def get_rollout_data(
    args: argparse.Namespace, rollout_data_ref: list[Box], dp_rank: int, dp_size: int
) -> dict[str, Any]:
    import ray

    assert len(rollout_data_ref) == dp_size
    rollout_data: dict[str, Any] = ray.get(rollout_data_ref[dp_rank].inner)
    rollout_data.pop("partition", None)
    return rollout_data
