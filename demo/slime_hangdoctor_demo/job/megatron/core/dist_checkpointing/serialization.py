"""`save` as megatron/core/dist_checkpointing/serialization.py: hands the sharded state dict to the
save strategy (torch_dist), which plans the save across ranks and writes each rank's part."""

from __future__ import annotations

from typing import Any

from megatron.core.dist_checkpointing.strategies.torch import TorchDistSaveShardedStrategy


def save(
    sharded_state_dict: dict[str, Any],
    checkpoint_dir: str,
    sharded_strategy: TorchDistSaveShardedStrategy,
) -> None:
    sharded_strategy.save(sharded_state_dict, checkpoint_dir)
