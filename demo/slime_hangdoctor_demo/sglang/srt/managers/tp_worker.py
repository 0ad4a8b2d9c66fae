"""The thin TpModelWorker layer between scheduler and model runner (as `sglang/srt/managers/tp_worker.py`)."""

from __future__ import annotations

from typing import Any

from slime_hangdoctor_demo.sglang.srt.managers.schedule_batch import ScheduleBatch
from slime_hangdoctor_demo.sglang.srt.model_executor.model_runner import ModelRunner

Msg = dict[str, Any]


class TpModelWorker:
    """The thin worker layer between scheduler and model runner (as `managers/tp_worker.py`)."""

    def __init__(self, model_runner: ModelRunner) -> None:
        self.model_runner = model_runner

    def forward_batch_generation(self, batch: ScheduleBatch) -> list[tuple[int, float]]:
        return self.model_runner.forward(batch)

    def init_weights_update_group(self, req: Msg) -> tuple[bool, str]:
        return self.model_runner.init_weights_update_group(req)

    def destroy_weights_update_group(self, req: Msg) -> tuple[bool, str]:
        return self.model_runner.destroy_weights_update_group(
            str(req.get("group_name", "weight_update_group"))
        )

    def update_weights_from_distributed(self, req: Msg) -> tuple[bool, str]:
        return self.model_runner.update_weights_from_distributed(req)

    def update_weights_from_tensor(self, req: Msg) -> tuple[bool, str]:
        return self.model_runner.update_weights_from_tensor(req)

    def update_weights_from_disk(self, req: Msg) -> tuple[bool, str]:
        return self.model_runner.update_weights_from_disk(
            str(req.get("model_path")), req.get("load_format")
        )
