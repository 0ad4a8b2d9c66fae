"""Weight sync for separate rollout GPUs: a process group shared by train rank 0 and every engine,
then one `dist.broadcast` per tensor while the engines receive it in /update_weights_from_distributed."""

from __future__ import annotations

import argparse
import logging
import random
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from slime.backends.megatron_utils.update_weight.common import (
    begin_weight_update,
    end_weight_update,
    weight_update_selector,
)
from slime.backends.sglang_utils.sglang_engine import (
    WEIGHT_SESSION_FAULTS,
    WEIGHT_SYNC_FAULTS,
    check_server_fault_not_live,
    wait_until_server_fault_live,
)
from slime.utils.distributed_utils import get_gloo_group, init_process_group
from slime.utils.misc import fault_armed, get_free_port

logger = logging.getLogger(__name__)

# The job laid out as miles (demo/launch.py `miles_job` renames the package `miles`, this file
# update_weight_from_distributed/broadcast.py) runs miles main's weight-update session around the
# broadcast, as miles's DistBucketedWeightUpdateMixin.update_weights does
# (update_weight_from_distributed/mixin.py:309-331, :340-392 @31f1ca961): after the pause and the
# flush, `begin_weight_update` on every engine; after the broadcast, `update_weight_version`,
# `end_weight_update`, then the continue. slime's own job has no session.
WEIGHT_UPDATE_SESSION = __name__.split(".", 1)[0] == "miles"


class UpdateWeightFromDistributed:
    def __init__(self, args: argparse.Namespace, model: dict[str, Any]) -> None:
        self.args = args
        self.model = model
        self.weight_version = 0
        self.rollout_engines: list[Any] = []
        self.rollout_engine_lock: Any = None
        self._group_name = "slime-pp_0"
        self._model_update_groups: Any = None
        self._is_pp_src_rank = False
        self.rollout_manager: Any = None  # demo: set by the actor (a fault's hook)

    def connect_rollout_engines(
        self,
        rollout_engines: list[Any],
        rollout_engine_lock: Any,
        engine_gpu_counts: list[int] | None = None,
        engine_gpu_offsets: list[int] | None = None,
        engine_parallel_configs: list[dict[str, Any]] | None = None,
    ) -> None:
        import torch.distributed as dist

        self.rollout_engines = rollout_engines
        self.rollout_engine_lock = rollout_engine_lock
        # DP rank 0 / TP rank 0 of the (only) pipeline stage sends the weights.
        self._is_pp_src_rank = dist.get_rank() == 0
        if self.args.fault == "actor_queue_cycle":
            # Demo fault (slime PR#2331): with PP>1 every stage's source rank creates its own
            # `slime-pp_<k>` group with every engine, concurrently; here each train rank stands
            # for one PP stage's source.
            self._group_name = f"slime-pp_{dist.get_rank()}"
            self._model_update_groups = connect_rollout_engines_pp_concurrently(
                self.args, self._group_name, rollout_engines, dist.get_rank()
            )
            return
        if self._is_pp_src_rank:
            if self.args.fault in (*WEIGHT_SYNC_FAULTS, *WEIGHT_SESSION_FAULTS):
                check_server_fault_not_live(self.args, rollout_engines[self.args.fault_engine])
            self._model_update_groups = connect_rollout_engines_from_distributed(
                self.args, self._group_name, rollout_engines
            )

    def update_weights(self) -> None:
        import ray
        import torch.distributed as dist

        self.weight_version += 1
        if dist.get_rank() == 0:
            self._continue_alongside_pause()
            ray.get([engine.pause_generation.remote() for engine in self.rollout_engines])
            ray.get([engine.flush_cache.remote() for engine in self.rollout_engines])
            if WEIGHT_UPDATE_SESSION:
                self._wait_for_timed_engine_fault(WEIGHT_SESSION_FAULTS, "session")
                begin_weight_update(self.rollout_engines, weight_update_selector(self.args))
        dist.barrier(group=get_gloo_group())
        if self._is_pp_src_rank:
            self._wait_for_timed_engine_fault()
            for bucket in self._named_tensor_buckets():
                self._update_bucket_weights_from_distributed(bucket)
        dist.barrier(group=get_gloo_group())
        if dist.get_rank() == 0:
            if WEIGHT_UPDATE_SESSION:
                version = str(self.weight_version)
                ray.get([e.update_weight_version.remote(version) for e in self.rollout_engines])
                end_weight_update(self.rollout_engines)
            ray.get([engine.continue_generation.remote() for engine in self.rollout_engines])
        dist.barrier(group=get_gloo_group())

    def _named_tensor_buckets(self) -> list[list[tuple[str, Any]]]:
        """Group the HF-named tensors into buckets of at most --update-weight-buffer-size bytes."""
        buckets: list[list[tuple[str, Any]]] = [[]]
        size = 0
        for name, param in self.model.items():
            nbytes = param.numel() * param.element_size()
            if buckets[-1] and size + nbytes > self.args.update_weight_buffer_size:
                buckets.append([])
                size = 0
            buckets[-1].append((name, param))
            size += nbytes
        return buckets

    def _update_bucket_weights_from_distributed(
        self, converted_named_tensors: list[tuple[str, Any]]
    ) -> None:
        import ray

        # lock the rollout engines to prevent dead lock on broadcast.
        while not ray.get(self.rollout_engine_lock.acquire.remote()):
            time.sleep(0.1)
        refs = update_weights_from_distributed(
            self._group_name,
            self._model_update_groups,
            self.weight_version,
            self.rollout_engines,
            converted_named_tensors,
            on_posted=self._resume_health_checks_early if self._health_checks_slip() else None,
        )
        ray.get(refs)
        ray.get(self.rollout_engine_lock.release.remote())

    def _health_checks_slip(self) -> bool:
        """Demo fault `weight_sync_health_check_queued` (open-instruct PR#1454's shape): at the
        armed sync, a fork that resumes the health monitors once the update is posted to the
        engines, not after it (slime pauses them in recover_updatable_engines and resumes them with
        the next generate). Each check then queues on an engine actor behind the update. Resumed
        any earlier (between pause_generation and the update), a check would reach a paused
        engine, whose /health_generate fails after SGLang's 20 s and gets the engine killed."""
        return (
            self._armed_step(("weight_sync_health_check_queued",)) is not None
            and self.rollout_manager is not None
        )

    def _armed_step(self, faults: tuple[str, ...]) -> int | None:
        """The train step this sync follows, when the job's fault is one of `faults` and armed
        from that step on (sync 1 is the initial one; sync k+2 follows step k); else None."""
        step = self.weight_version - 2
        if (
            step >= 0
            and self.args.fault in faults
            and fault_armed(self.args, self.args.fault, step)
        ):
            return step
        return None

    def _continue_alongside_pause(self) -> None:
        """Demo fault `update_pause_orphaned` (sglang#33696): from the armed sync on, a second
        control caller (a fork's rollout-side resume) posts `/continue_generation` to the fault
        engine while this update's `/pause_generation` waits for its broadcast: two control
        calls on one tokenizer worker at once."""
        import threading

        import ray
        import requests

        step = self._armed_step(("update_pause_orphaned",))
        if step is None:
            return
        engine = self.rollout_engines[self.args.fault_engine]
        where = f"a continue alongside the update's pause of engine {self.args.fault_engine}"
        wait_until_server_fault_live(self.args, engine, step, where)
        url = ray.get(engine.get_url.remote())
        key = self.args.sglang_api_key
        headers = {"Authorization": f"Bearer {key}"} if key else {}

        def pause_in_flight() -> bool:
            text = requests.get(f"{url}/metrics", headers=headers, timeout=5).text
            return any(
                line.startswith("sglang:http_requests_active")
                and 'endpoint="/pause_generation"' in line
                and float(line.rsplit(" ", 1)[1]) >= 1
                for line in text.splitlines()
            )

        def resume() -> None:
            deadline = time.monotonic() + 30
            while not pause_in_flight() and time.monotonic() < deadline:
                time.sleep(0.05)
            requests.post(f"{url}/continue_generation", json={}, headers=headers, timeout=60)

        threading.Thread(target=resume, name="rollout-resume", daemon=True).start()

    def _resume_health_checks_early(self) -> None:
        import ray

        logger.info("demo fault plan: the health monitors resume once the update is posted")
        ray.get(self.rollout_manager.health_monitoring_resume.remote())

    def _wait_for_timed_engine_fault(
        self,
        faults: tuple[str, ...] = (*WEIGHT_SYNC_FAULTS, "engine_paused_by_update"),
        what: str = "sync",
    ) -> None:
        """Demo fault plan (`WEIGHT_SYNC_FAULTS`, `engine_paused_by_update`; before a miles session,
        `WEIGHT_SESSION_FAULTS`): from the armed step on, let that engine's timed server fault go
        live before this sync (the first one it misses; the one after which it stays paused)."""
        step = self._armed_step(faults)
        if step is not None:
            engine = self.rollout_engines[self.args.fault_engine]
            where = f"weight {what} to engine {self.args.fault_engine}"
            wait_until_server_fault_live(self.args, engine, step, where)


def connect_rollout_engines_from_distributed(
    args: argparse.Namespace, group_name: str, rollout_engines: list[Any]
) -> Any:
    import ray

    master_address = "127.0.0.1"
    master_port = get_free_port(start_port=random.randint(20000, 21000))
    world_size = len(rollout_engines) * args.rollout_num_gpus_per_engine + 1
    refs = [
        engine.init_weights_update_group.remote(
            master_address,
            master_port,
            i * args.rollout_num_gpus_per_engine + 1,
            world_size,
            group_name,
            backend="nccl",
        )
        for i, engine in enumerate(rollout_engines)
    ]
    model_update_groups = init_process_group(
        backend="gloo",  # no GPU in the demo: the engines serve "nccl" with gloo as well
        init_method=f"tcp://{master_address}:{master_port}",
        timeout=timedelta(minutes=args.distributed_timeout_minutes),
        world_size=world_size,
        rank=0,
        group_name=group_name,
    )
    ray.get(refs)
    return model_update_groups


def connect_rollout_engines_pp_concurrently(
    args: argparse.Namespace, group_name: str, rollout_engines: list[Any], pp_rank: int
) -> Any:
    """Each PP source asks every engine to join its group, starting with a different engine (the
    order the calls reach each engine is whatever Ray delivers). Each engine actor serves one
    call at a time and joins with a blocking HTTP call: engine k, busy joining `slime-pp_k`,
    never takes the other group's call queued behind it, and both groups wait forever."""
    import ray
    import torch.distributed as dist

    from slime.observability.logging_utils import log_fault_armed

    master_address = "127.0.0.1"
    master_port = get_free_port(start_port=random.randint(21000, 22000) + 100 * pp_rank)
    world_size = len(rollout_engines) * args.rollout_num_gpus_per_engine + 1
    n = len(rollout_engines)
    order = [(pp_rank + k) % n for k in range(n)]

    def join(i: int) -> Any:
        return rollout_engines[i].init_weights_update_group.remote(
            master_address,
            master_port,
            i * args.rollout_num_gpus_per_engine + 1,
            world_size,
            group_name,
            backend="nccl",
        )

    refs = [join(order[0])]
    # the other source's first call reaches its engine at the same moment as this one
    dist.barrier(group=get_gloo_group())
    time.sleep(1.0)
    refs += [join(i) for i in order[1:]]
    if pp_rank == 0:
        log_fault_armed(logger, args.fault, "slime-pp group creation", 0)
    model_update_groups = init_process_group(
        backend="gloo",
        init_method=f"tcp://{master_address}:{master_port}",
        timeout=timedelta(minutes=args.distributed_timeout_minutes),
        world_size=world_size,
        rank=0,
        group_name=group_name,
    )
    ray.get(refs)
    return model_update_groups


def update_weights_from_distributed(
    group_name: str,
    group: Any,
    weight_version: int,
    rollout_engines: list[Any],
    converted_named_tensors: list[tuple[str, Any]],
    on_posted: Callable[[], None] | None = None,  # demo only (a fault's hook), None in slime
) -> list[Any]:
    import torch.distributed as dist

    refs = [
        engine.update_weights_from_distributed.remote(
            names=[name for name, _ in converted_named_tensors],
            dtypes=[
                str(param.dtype).removeprefix("torch.") for _, param in converted_named_tensors
            ],
            shapes=[list(param.shape) for _, param in converted_named_tensors],
            group_name=group_name,
            weight_version=str(weight_version),
        )
        for engine in rollout_engines
    ]
    if on_posted is not None:
        on_posted()
    for _, param in converted_named_tensors:
        dist.broadcast(param.data, 0, group=group)
    return refs
