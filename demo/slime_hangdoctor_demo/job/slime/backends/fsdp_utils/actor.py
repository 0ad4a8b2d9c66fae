"""`FSDPTrainRayActor`: slime's FSDP training backend (`--train-backend fsdp`), in its own files
(slime/backends/fsdp_utils/, slime/backends/training_utils/). The demo reuses the Megatron actor's
init and weight sync; `train` follows slime's FSDP actor: `timer("train")` around the step,
`timer("actor_train")` around the update, the user's loss through training_utils' loss_function.
"""

from __future__ import annotations

import logging
from typing import Any

from slime.backends.megatron_utils.actor import MegatronTrainRayActor
from slime.backends.training_utils.data import get_rollout_data
from slime.backends.training_utils.loss import loss_function
from slime.observability.logging_utils import log_fault_armed
from slime.observability.timer import Timer
from slime.utils.misc import Box, fault_armed

logger = logging.getLogger(__name__)


class FSDPTrainRayActor(MegatronTrainRayActor):
    def train(self, rollout_id: int, rollout_data_ref: list[Box]) -> None:
        import torch.distributed as dist

        Timer().end("train_wait")
        Timer().start("train")
        rollout_data = get_rollout_data(
            self.args, rollout_data_ref, dist.get_rank(), dist.get_world_size()
        )
        self._train_core(rollout_id, rollout_data)
        Timer().end("train")
        Timer().start("train_wait")

    def _train_core(self, rollout_id: int, rollout_data: dict[str, Any]) -> None:
        import torch

        rewards = rollout_data["rewards"]
        lengths = rollout_data["response_lengths"]
        mask = torch.tensor([float(n > 0) for n in lengths] or [0.0])
        if self.args.rank == self.args.fault_rank and fault_armed(
            self.args, "train_custom_loss_stuck", rollout_id
        ):
            log_fault_armed(
                logger,
                self.args.fault,
                f"the custom loss on train rank {self.args.rank} (a micro-batch without response "
                "tokens)",
                rollout_id,
            )
            mask = torch.zeros_like(mask)
        Timer().start("actor_train")
        for _mbs_id in range(self._packed_data(rollout_id)):
            metrics = self._train_step({"loss_masks": mask, "rewards": rewards})
        Timer().end("actor_train")
        if self.args.rank == 0:
            logger.info(
                f"step {self.optimizer['step']}: {{'train/loss': {metrics['loss']:.6f}, "
                f"'train/grad_norm': {metrics['grad_norm']:.4f}}}"
            )

    def _packed_data(self, rollout_id: int) -> int:
        """The number of micro-batches this rank trains on, as slime's `_packed_data`
        (fsdp_utils/actor.py:361-430 at 9bfe152): under dynamic batch sizes each rank counts its
        own from its samples' lengths, then an all_reduce MAX over the DP group (:397) gives every
        rank the same count. Fault `train_fsdp_microbatch_diverged` (verl PR#5591 / #5451): the
        counts are not reduced, and rank `fault_rank`'s samples need one micro-batch more."""
        import torch
        import torch.distributed as dist

        if fault_armed(self.args, "train_fsdp_microbatch_diverged", rollout_id):
            if self.args.rank == self.args.fault_rank:
                log_fault_armed(
                    logger,
                    self.args.fault,
                    f"train rank {self.args.rank} counts one more micro-batch than its peers "
                    "(the counts are not reduced)",
                    rollout_id,
                )
                return 2
            return 1
        num_microbatches = torch.tensor([1])
        dist.all_reduce(num_microbatches, op=dist.ReduceOp.MAX)
        return int(num_microbatches.item())

    def _train_step(self, batch: dict[str, Any]) -> dict[str, float]:
        import time

        import torch
        import torch.distributed as dist

        logits = torch.tensor([float(r) for r in batch["rewards"]] or [0.0])[
            : len(batch["loss_masks"])
        ]
        if len(logits) < len(batch["loss_masks"]):
            logits = torch.cat([logits, torch.zeros(len(batch["loss_masks"]) - len(logits))])
        loss = loss_function(self.args, batch, logits)
        time.sleep(self.args.train_step_seconds)  # the GPU work of a real step
        flat = torch.cat([p.flatten() for p in self.model.values()]) * 0 + float(loss) * 0.01
        dist.all_reduce(flat)  # FSDP's gradient reduce-scatter: every rank must reach it
        flat /= dist.get_world_size()
        offset = 0
        for p in self.model.values():
            n = p.numel()
            p.sub_(self.optimizer["lr"] * flat[offset : offset + n].view_as(p))
            offset += n
        self.optimizer["step"] += 1
        return {"loss": float(loss), "grad_norm": float(flat.norm())}
