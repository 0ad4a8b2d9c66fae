"""`RayTrainGroup`: creates the MegatronTrainRayActor ranks and fans calls out to them."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from typing import Any

import ray
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from slime.backends.sglang_utils.sglang_engine import wait_until_server_fault_live
from slime.utils.misc import fault_armed


class RayTrainGroup:
    def __init__(
        self,
        args: argparse.Namespace,
        num_nodes: int,
        num_gpus_per_node: int,
        pg: tuple[Any, list[int], list[int]],
        num_gpus_per_actor: float = 0.4,
        role: str = "actor",
    ) -> None:
        self.args = args
        self._num_nodes = num_nodes
        self._num_gpus_per_node = num_gpus_per_node
        self.role = role
        self._rollout_manager: Any = None
        self._disk_weight_version = 0
        self._allocate_gpus_for_actor(pg, num_gpus_per_actor)

    def _allocate_gpus_for_actor(
        self, pg: tuple[Any, list[int], list[int]], num_gpus_per_actor: float
    ) -> None:
        from slime.backends.megatron_utils.actor import MegatronTrainRayActor

        actor_impl: Any = MegatronTrainRayActor
        if self.args.train_backend == "fsdp":
            from slime.backends.fsdp_utils.actor import FSDPTrainRayActor

            actor_impl = FSDPTrainRayActor
        world_size = self._num_nodes * self._num_gpus_per_node
        placement_group, bundle_indices, _gpu_ids = pg
        env_vars = {"NCCL_CUMEM_ENABLE": "0", "OMP_NUM_THREADS": "1"}
        # On the 2-core demo box a "GPU" is nothing: the actors ask for no resources at all.
        actor_cls: Any = ray.remote(num_gpus=0, runtime_env={"env_vars": env_vars})(actor_impl)
        self._actor_handlers: list[Any] = []
        master_addr, master_port = None, None
        for rank in range(world_size):
            actor = actor_cls.options(
                num_cpus=0,
                num_gpus=0,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    placement_group=placement_group,
                    placement_group_bundle_index=bundle_indices[rank],
                ),
            ).remote(world_size, rank, master_addr, master_port)
            if rank == 0:
                master_addr, master_port = ray.get(actor.get_master_addr_and_port.remote())
            self._actor_handlers.append(actor)

    def async_init(self, args: argparse.Namespace, role: str, with_ref: bool = False) -> list[Any]:
        self.args = args
        return [actor.init.remote(args, role, with_ref=with_ref) for actor in self._actor_handlers]

    def async_train(self, rollout_id: int, rollout_data_ref: Any) -> list[Any]:
        return [actor.train.remote(rollout_id, rollout_data_ref) for actor in self._actor_handlers]

    def update_weights(self) -> list[Any]:
        """Push the trained weights to the rollout engines (every rank takes part); with
        `--update-weight-transport disk`, then have the engines reload the checkpoint the ranks
        wrote (slime main 624b824, slime/ray/actor_group.py:162-173)."""
        if not self._full_disk_weight_update_enabled():
            return list(ray.get([actor.update_weights.remote() for actor in self._actor_handlers]))
        weight_version = self._disk_weight_version + 1
        disk_weight_dir = Path(self.args.update_weight_disk_dir) / f"weight_v{weight_version:06d}"
        ret = list(ray.get([actor.update_weights.remote() for actor in self._actor_handlers]))
        self._disk_weight_version = weight_version
        self._reload_rollout_weights_from_disk(disk_weight_dir, str(weight_version))
        return ret

    def _full_disk_weight_update_enabled(self) -> bool:
        return (
            self.role == "actor"
            and self.args.update_weight_mode == "full"
            and self.args.update_weight_transport == "disk"
        )

    def _reload_rollout_weights_from_disk(self, disk_weight_dir: Path, weight_version: str) -> None:
        """actor_group.py:227-269: pause every updatable engine, flush its cache, reload the
        checkpoint (`/update_weights_from_disk`), continue; no timeout on any of them."""
        assert self._rollout_manager is not None, "disk weight update requires a rollout manager."
        if self.args.offload_rollout:
            ray.get(self._rollout_manager.onload_weights.remote())
        engines, *_ = ray.get(self._rollout_manager.get_updatable_engines_and_lock.remote())
        if not engines:
            if not self.args.update_weight_disk_keep_files:
                shutil.rmtree(disk_weight_dir, ignore_errors=True)
            return
        model_path = str(disk_weight_dir)
        self._wait_for_timed_engine_fault(engines, int(weight_version))
        ray.get([engine.pause_generation.remote() for engine in engines])
        ray.get([engine.flush_cache.remote() for engine in engines])
        ray.get(
            [
                engine.update_weights_from_disk.remote(
                    model_path=model_path, weight_version=weight_version
                )
                for engine in engines
            ]
        )
        if not self.args.update_weight_disk_keep_files:
            shutil.rmtree(disk_weight_dir, ignore_errors=True)
        ray.get([engine.continue_generation.remote() for engine in engines])

    def _wait_for_timed_engine_fault(self, engines: list[Any], weight_version: int) -> None:
        """Demo fault plan (`weight_load_slow_storage`): from the armed step on, the engine's
        server fault (its host reads the checkpoint from slow storage) goes live before this
        reload (reload 1 is the initial one; reload k+2 follows step k)."""
        step = weight_version - 2
        if step >= 0 and fault_armed(self.args, "weight_load_slow_storage", step):
            engine = engines[self.args.fault_engine]
            where = f"disk weight reload of engine {self.args.fault_engine}"
            wait_until_server_fault_live(self.args, engine, step, where)

    def save_model(self, step_id: int) -> list[Any]:
        """Save the actor model (every rank takes part)."""
        return list(ray.get([actor.save_model.remote(step_id) for actor in self._actor_handlers]))

    def onload(self) -> list[Any]:
        return list(ray.get([actor.wake_up.remote() for actor in self._actor_handlers]))

    def offload(self) -> list[Any]:
        return list(ray.get([actor.sleep.remote() for actor in self._actor_handlers]))

    def clear_memory(self) -> list[Any]:
        return list(ray.get([actor.clear_memory.remote() for actor in self._actor_handlers]))

    def set_rollout_manager(self, rollout_manager: Any) -> list[Any]:
        self._rollout_manager = rollout_manager
        return list(
            ray.get(
                [
                    actor.set_rollout_manager.remote(rollout_manager)
                    for actor in self._actor_handlers
                ]
            )
        )
