"""`MegatronTrainRayActor`: one training rank (gloo on CPU in the demo)."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from slime.backends.megatron_utils.model import initialize_model_and_optimizer, save, train
from slime.observability.logging_utils import log_fault_armed
from slime.observability.timer import Timer, timer, with_defer
from slime.ray.train_actor import TrainRayActor
from slime.utils.data import process_rollout_data
from slime.utils.distributed_utils import get_gloo_group
from slime.utils.misc import Box, fault_armed

logger = logging.getLogger(__name__)


class MegatronTrainRayActor(TrainRayActor):
    @with_defer(lambda: Timer().start("train_wait"))
    def init(self, args: argparse.Namespace, role: str, with_ref: bool = False) -> int:
        super().init(args, role, with_ref)
        import torch.distributed as dist

        Timer().log_enabled = dist.get_rank() == 0
        from megatron.training.global_vars import set_args

        set_args(args)  # Megatron's initialize_megatron
        logger.info("Applying monkey patch to torch.distributed")
        dist.barrier(group=get_gloo_group())
        logger.info("Load checkpoint from HuggingFace model into Megatron (path=demo/model)")
        self.model, self.optimizer = initialize_model_and_optimizer(args)
        self.rollout_manager: Any = None
        self.weights_version = 0
        # the updater as slime main chooses it (actor.py:152-175): disk, tensor (colocated), NCCL
        if args.update_weight_transport == "disk":
            from slime.backends.megatron_utils.update_weight.update_weight_from_disk import (
                UpdateWeightFromDisk,
            )

            update_weight_cls: Any = UpdateWeightFromDisk
        elif args.colocate:
            from slime.backends.megatron_utils.update_weight.update_weight_from_tensor import (
                UpdateWeightFromTensor,
            )

            update_weight_cls = UpdateWeightFromTensor
        else:
            from slime.backends.megatron_utils.update_weight.update_weight_from_distributed import (
                UpdateWeightFromDistributed,
            )

            update_weight_cls = UpdateWeightFromDistributed
        self.weight_updater = update_weight_cls(args, self.model)
        if args.offload_train:
            self.sleep()
        return int(args.start_rollout_id)

    @timer
    def sleep(self) -> None:
        logger.info(f"[Rank {self.args.rank}] Memory-Usage before offload model")

    @timer
    def wake_up(self) -> None:
        logger.info(f"[Rank {self.args.rank}] Memory-Usage after wake_up model")

    def clear_memory(self) -> None:
        pass

    def set_rollout_manager(self, rollout_manager: Any) -> None:
        import ray
        import torch.distributed as dist

        self.rollout_manager = rollout_manager
        # demo: the weight updater's fault hook (weight_sync_health_check_queued) resumes its monitors
        self.weight_updater.rollout_manager = rollout_manager
        if dist.get_rank() == 0:
            ray.get(
                rollout_manager.set_train_parallel_config.remote({"dp_size": dist.get_world_size()})
            )

    def _get_rollout_data(self, rollout_data_ref: list[Box]) -> dict[str, Any]:
        import torch.distributed as dist

        return process_rollout_data(
            self.args, rollout_data_ref, dist.get_rank(), dist.get_world_size()
        )

    def train(self, rollout_id: int, rollout_data_ref: list[Box]) -> None:
        Timer().end("train_wait")
        if self.args.offload_train:
            self.wake_up()
        Timer().start("data_preprocess")
        rollout_data = self._get_rollout_data(rollout_data_ref)
        Timer().end("data_preprocess")
        self.train_actor(rollout_id, rollout_data)
        if self.args.offload_train:
            self.sleep()
        Timer().start("train_wait")

    def train_actor(self, rollout_id: int, rollout_data: dict[str, Any]) -> None:
        Timer().start("train")
        data_iterator = [rollout_data]
        rewards = rollout_data["rewards"]
        if self.args.rank == 0:
            logger.info(
                f"rollout {rollout_id}: {{'rollout/rewards': {sum(rewards) / max(len(rewards), 1):.4f}}}"
            )
        num_microbatches = rollout_data.get("num_microbatches", [1])
        train(rollout_id, self.model, self.optimizer, data_iterator, num_microbatches, self.args)
        Timer().end("train")
        if self.args.rank == 0:
            logger.info(f"perf {rollout_id}: {{'perf/step': {rollout_id}}}")

    @timer
    def save_model(self, iteration: int) -> None:
        if fault_armed(self.args, "checkpoint_slow_storage", iteration):
            self.args.slow_storage = True
            if self.args.rank == 0:
                log_fault_armed(
                    logger,
                    self.args.fault,
                    "save_checkpoint on train rank 0 (slow storage)",
                    iteration,
                )
        if fault_armed(self.args, "checkpoint_stuck_storage", iteration):
            self.args.stuck_storage = True
            if self.args.rank == 0:
                log_fault_armed(
                    logger,
                    self.args.fault,
                    "save_checkpoint on train rank 0 (stuck storage)",
                    iteration,
                )
        if fault_armed(self.args, "checkpoint_writer_deadlock", iteration):
            self.args.writer_deadlock = True
            if self.args.rank == 0:
                log_fault_armed(
                    logger,
                    self.args.fault,
                    "save_checkpoint on train rank 0 (forked writer deadlocked)",
                    iteration,
                )
        if fault_armed(self.args, "checkpoint_plan_gather_stuck", iteration):
            self.args.async_save = True
            self.args.plan_coordinator_mismatch = True
            if self.args.rank == 0:
                log_fault_armed(
                    logger,
                    self.args.fault,
                    "save_state_dict_async_plan on every train rank (plan gather, a coordinator "
                    "per rank)",
                    iteration,
                )
        save(iteration, self.model, self.optimizer, None)

    @timer
    def update_weights(self) -> None:
        """slime main 624b824, slime/backends/megatron_utils/actor.py:595-640."""
        import ray
        import torch.distributed as dist

        if self.args.use_fault_tolerance:
            if dist.get_rank() == 0:
                ray.get(self.rollout_manager.recover_updatable_engines.remote())
            dist.barrier(group=get_gloo_group())

        (
            rollout_engines,
            rollout_engine_lock,
            num_new_engines,
            engine_gpu_counts,
            engine_gpu_offsets,
            engine_parallel_configs,
        ) = ray.get(self.rollout_manager.get_updatable_engines_and_lock.remote())

        if not rollout_engines:
            if dist.get_rank() == 0:
                logger.info("No updatable SGLang engines are running; skip weight update.")
            return

        if num_new_engines > 0:
            self.weight_updater.connect_rollout_engines(
                rollout_engines,
                rollout_engine_lock,
                engine_gpu_counts=engine_gpu_counts,
                engine_gpu_offsets=engine_gpu_offsets,
                engine_parallel_configs=engine_parallel_configs,
            )
            dist.barrier(group=get_gloo_group())
            if dist.get_rank() == 0:
                ray.get(self.rollout_manager.clear_updatable_num_new_engines.remote())
        logger.info(f"[Rank {self.args.rank}] Memory-Usage before update_weights")
        self.weight_updater.update_weights()
        logger.info(f"[Rank {self.args.rank}] Memory-Usage after update_weights")
        self.weights_version += 1
        if dist.get_rank() == 0 and self.args.max_weight_staleness is not None:
            # the engines now serve this version (miles 31f1ca961, megatron_utils/actor.py:781;
            # the demo tells the RolloutManager only where its rollout gate reads it)
            ray.get(self.rollout_manager.set_weight_version.remote(self.weights_version))
