"""A user's conversion of rollout samples to train data, plugged in with
`--custom-convert-samples-to-train-data-path
user_plugins.packed_train_data.convert_samples_to_train_data` (slime's hook of that name).

It packs the rollout batch into one padded token array and hands it to a Ray task, which cuts one
shard per data-parallel rank and packs each shard in a Ray task of its own, waiting for it. Ray
grants a task's lease only while the arguments that running tasks pin in the object store stay
under 70 % of the store (`max_task_args_memory_fraction`): the outer task pins the whole batch
while it waits, and a shard's arguments do not fit beside it. The shard's task never starts, the
outer task never returns, and the RolloutManager's `generate` waits for it (ray-project/ray#62093:
granted leases pin arguments that cannot be spilled, and the next task waits for plasma memory).

The demo head gives this fault a small object store (`FaultSpec.object_store_mib`); the sizes
follow the store that the cluster reports, so the shape holds for any store.
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

import numpy as np
import ray

logger = logging.getLogger(__name__)

BATCH_FRACTION = 0.45  # of the object store: the padded batch the outer task pins
SHARD_FRACTION = 0.30  # one data-parallel shard (its padded tokens and masks)


@ray.remote(num_cpus=0.01)
def pack_shard(shard: np.ndarray, rank: int) -> dict[str, Any]:
    return {"rank": rank, "tokens": int(shard.size)}


@ray.remote(num_cpus=0.01)
def pack_rollout_batch(batch: np.ndarray, dp_size: int, shard_bytes: int) -> list[dict[str, Any]]:
    out = []
    for rank in range(dp_size):
        shard = np.zeros(shard_bytes, dtype=np.uint8)
        shard[: min(shard_bytes, batch.size)] = batch[:shard_bytes]
        out.append(ray.get(pack_shard.remote(shard, rank)))
    return out


def convert_samples_to_train_data(args: argparse.Namespace, samples: list[Any]) -> dict[str, Any]:
    resources = ray.cluster_resources()  # type: ignore[no-untyped-call]
    store = int(resources.get("object_store_memory", 0))
    batch = np.zeros(int(store * BATCH_FRACTION), dtype=np.uint8)
    packed = pack_rollout_batch.remote(batch, args.world_size, int(store * SHARD_FRACTION))
    return {
        "tokens": [s.tokens for s in samples],
        "response_lengths": [s.response_length for s in samples],
        "rewards": [float(s.reward or 0.0) for s in samples],
        "raw_reward": [float(s.reward or 0.0) for s in samples],
        "truncated": [0 for _ in samples],
        "sample_indices": [s.index for s in samples],
        "loss_masks": [s.loss_mask or [1] * s.response_length for s in samples],
        "packed": ray.get(packed),
    }
