"""Full-weight sync through a shared filesystem and SGLang's disk reload, as slime main's
slime/backends/megatron_utils/update_weight/update_weight_from_disk.py (624b824, lines 17-95):
every train rank takes part in writing an HF checkpoint to `--update-weight-disk-dir/
weight_v<N>` (`save_hf_model_to_path`, between gloo barriers). The engines' reload
(`/update_weights_from_disk`) is run by the driver's RayTrainGroup afterwards
(`_reload_rollout_weights_from_disk`, slime/ray/actor_group.py:162-173, 227-269)."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from typing import Any

from slime.utils.distributed_utils import get_gloo_group

from ..hf_checkpoint_saver import save_hf_model_to_path


class UpdateWeightFromDisk:
    """Full-weight sync through a shared filesystem and SGLang disk reload."""

    def __init__(self, args: argparse.Namespace, model: dict[str, Any]) -> None:
        self.args = args
        self.model = model
        self.model_name = "demo"
        self.quantization_config: dict[str, Any] | None = None
        self.weight_version = 0
        self.rollout_engines: list[Any] = []
        self.rollout_engine_lock: Any = None

    def connect_rollout_engines(
        self,
        rollout_engines: list[Any],
        rollout_engine_lock: Any,
        engine_gpu_counts: list[int] | None = None,
        engine_gpu_offsets: list[int] | None = None,
        engine_parallel_configs: list[dict[str, Any]] | None = None,
    ) -> None:
        self.rollout_engines = rollout_engines
        self.rollout_engine_lock = rollout_engine_lock

    def update_weights(self) -> None:
        """update_weight_from_disk.py:65-95."""
        import torch.distributed as dist

        self.weight_version += 1
        version_dir = Path(self.args.update_weight_disk_dir) / f"weight_v{self.weight_version:06d}"
        if dist.get_rank() == 0:
            shutil.rmtree(version_dir, ignore_errors=True)
        dist.barrier(group=get_gloo_group())
        version_dir.mkdir(parents=True, exist_ok=True)
        save_hf_model_to_path(
            self.args,
            version_dir,
            self.model,
            model_name=self.model_name,
            quantization_config=self.quantization_config,
            progress_desc="Save HF  weights for update from disk",
        )
        dist.barrier(group=get_gloo_group())
        # SGLang reload is orchestrated by RayTrainGroup after the checkpoint is fully written.
