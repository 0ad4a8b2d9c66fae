"""`TorchDistSaveShardedStrategy` as megatron/core/dist_checkpointing/strategies/torch.py: with
`--async-save` its `save` goes through `async_save`, which plans the save across ranks
(`save_state_dict_async_plan`) before any byte is written."""

from __future__ import annotations

import io
import os
from typing import Any

from megatron.core.dist_checkpointing.strategies.state_dict_saver import (
    save_state_dict_async_plan,
)


class TorchDistSaveShardedStrategy:
    def __init__(self, process_group: Any, coordinator_rank: int = 0) -> None:
        self.process_group = process_group
        self.coordinator_rank = coordinator_rank

    def save(self, sharded_state_dict: dict[str, Any], checkpoint_dir: str) -> None:
        self.async_save(sharded_state_dict, checkpoint_dir)

    def async_save(self, sharded_state_dict: dict[str, Any], checkpoint_dir: str) -> None:
        import torch

        central_plan = save_state_dict_async_plan(
            sharded_state_dict,
            checkpoint_dir,
            process_group=self.process_group,
            coordinator_rank=self.coordinator_rank,
        )
        for item in central_plan.get(torch.distributed.get_rank(self.process_group), ()):
            buf = io.BytesIO()
            torch.save(sharded_state_dict[item], buf)
            with open(os.path.join(checkpoint_dir, f"__{item}.distcp"), "wb") as fh:
                fh.write(buf.getvalue())
