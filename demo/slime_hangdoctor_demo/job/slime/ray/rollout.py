"""`RolloutManager`: owns the SGLang engines, runs rollouts and turns samples into train data."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import multiprocessing
import random
import threading
import time
from typing import Any

import ray
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from slime.backends.sglang_utils.sglang_engine import SGLangEngine, wait_until_server_fault_live
from slime.observability.logging_utils import configure_logger, log_fault_armed
from slime.ray.router_manager import start_session_server
from slime.ray.utils import Lock
from slime.rollout.base_types import call_rollout_fn
from slime.rollout.data_source import RolloutDataSourceWithBuffer
from slime.rollout.sglang_rollout import generate_rollout
from slime.utils.health_monitor import RolloutHealthMonitor
from slime.utils.http_utils import init_http_client
from slime.utils.misc import (
    Box,
    die_with_parent_after_fork,
    fault_armed,
    fault_arms_at,
    get_current_node_ip,
    get_free_port,
    load_function,
)
from slime.utils.types import Sample

logger = logging.getLogger(__name__)

GPU_MEMORY_TYPE_WEIGHTS = "weights"
GPU_MEMORY_TYPE_KV_CACHE = "kv_cache"
GPU_MEMORY_TYPE_CUDA_GRAPH = "cuda_graph"


@dataclasses.dataclass
class ServerGroup:
    """A group of homogeneous SGLang engines with the same configuration (slime main 624b824,
    slime/ray/rollout.py:46-219). The demo has one group per model, worker_type "regular"."""

    args: Any
    pg: Any  # (placement_group, reordered_bundle_indices, reordered_gpu_ids)
    all_engines: list[Any]
    num_gpus_per_engine: int
    num_new_engines: int
    worker_type: str = "regular"
    rank_offset: int = 0  # cumulative engine count before this group
    gpu_offset: int = 0  # cumulative GPU count before this group
    needs_offload: bool = False  # True when this group's GPUs overlap with megatron
    model_path: str | None = None  # checkpoint path for update_weights_from_disk
    router_ip: str | None = None
    router_port: int | None = None

    @property
    def nodes_per_engine(self) -> int:
        return max(1, self.num_gpus_per_engine // int(self.args.num_gpus_per_node))

    @property
    def engines(self) -> list[Any]:
        """Node-0 engines only (for multi-node serving)."""
        return self.all_engines[:: self.nodes_per_engine]

    def parallel_config(self) -> dict[str, Any]:
        return {"tp_size": self.num_gpus_per_engine, "pp_size": 1, "ep_size": 1, "moe_dp_size": 1}

    def start_engines(
        self, port_cursors: dict[int, int] | None = None
    ) -> tuple[list[Any], dict[int, int]]:
        """Create the Ray actors, allocate ports and fire `engine.init()` without waiting
        (rollout.py:90-199): the caller `ray.get`s the handles."""
        if port_cursors is None:
            port_cursors = {}
        args = self.args
        num_gpus_per_engine_on_node = min(self.num_gpus_per_engine, args.num_gpus_per_node)
        pg, reordered_bundle_indices, reordered_gpu_ids = self.pg
        rollout_ray_actor: Any = ray.remote(SGLangEngine)
        rollout_engines = []
        for i in range(len(self.all_engines)):
            if self.all_engines[i] is not None:
                continue
            global_rank = self.rank_offset + i
            gpu_index = self.gpu_offset + i * num_gpus_per_engine_on_node
            base_gpu_id = int(reordered_gpu_ids[gpu_index])
            scheduling_strategy = PlacementGroupSchedulingStrategy(
                placement_group=pg,
                placement_group_capture_child_tasks=True,
                placement_group_bundle_index=reordered_bundle_indices[gpu_index],
            )
            env_vars = {
                "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION": "false",
                "SGLANG_MEMORY_SAVER_CUDA_GRAPH": "true",
                "OMP_NUM_THREADS": "1",
            }
            if args.fault == "rollout_behind_proxy":
                # Demo: the engines run where the master node's proxy is not set. Ray's child
                # actors inherit the RolloutManager's runtime_env env_vars: clear the proxy ones
                # here (an empty value means no proxy to requests and httpx).
                env_vars.update(
                    dict.fromkeys(("http_proxy", "HTTP_PROXY", "no_proxy", "NO_PROXY"), "")
                )
            # On the 2-core demo box a "GPU" is nothing: the engines ask for no resources.
            rollout_engine = rollout_ray_actor.options(
                num_cpus=0,
                num_gpus=0,
                scheduling_strategy=scheduling_strategy,
                runtime_env={"env_vars": env_vars},
            ).remote(args, rank=global_rank, worker_type=self.worker_type, base_gpu_id=base_gpu_id)
            rollout_engines.append((global_rank, rollout_engine))
            self.all_engines[i] = rollout_engine

        self.num_new_engines = len(rollout_engines)
        if self.num_new_engines == 0:
            return [], port_cursors

        base_port = max(port_cursors.values()) if port_cursors else args.sglang_base_port
        addr_and_ports, port_cursors = _allocate_rollout_engine_addr_and_ports_normal(
            args=args,
            rollout_engines=rollout_engines,
            base_port=base_port,
            nodes_per_engine=self.nodes_per_engine,
        )
        init_handles = [
            engine.init.remote(
                **(addr_and_ports[rank]),
                router_ip=self.router_ip,
                router_port=self.router_port,
            )
            for rank, engine in rollout_engines
        ]
        return init_handles, port_cursors

    def offload(self) -> list[Any]:
        """Fire release_memory_occupation on all engines (non-blocking, rollout.py:201-209)."""
        if not self.needs_offload:
            return []
        return [
            engine.release_memory_occupation.remote()
            for engine in self.engines
            if engine is not None
        ]

    def onload(self, tags: list[str] | None = None) -> list[Any]:
        """Fire resume_memory_occupation on all engines (non-blocking, rollout.py:211-219)."""
        if not self.needs_offload:
            return []
        return [
            engine.resume_memory_occupation.remote(tags=tags)
            for engine in self.engines
            if engine is not None
        ]


@dataclasses.dataclass
class RolloutServer:
    """A model served behind a shared router, with one or more server groups (slime main
    624b824, slime/ray/rollout.py:222-363)."""

    server_groups: list[ServerGroup]
    router_ip: str | None = None
    router_port: int | None = None
    model_name: str = "default"
    update_weights: bool = True

    @property
    def engines(self) -> list[Any]:
        return [e for g in self.server_groups for e in g.engines]

    @property
    def all_engines(self) -> list[Any]:
        return [e for g in self.server_groups for e in g.all_engines]

    @property
    def num_new_engines(self) -> int:
        return sum(g.num_new_engines for g in self.server_groups)

    @num_new_engines.setter
    def num_new_engines(self, value: int) -> None:
        for g in self.server_groups:
            g.num_new_engines = value

    @property
    def engine_gpu_counts(self) -> list[int]:
        return [g.num_gpus_per_engine for g in self.server_groups for _ in g.engines]

    @property
    def engine_gpu_offsets(self) -> list[int]:
        return [
            g.gpu_offset + j * g.num_gpus_per_engine
            for g in self.server_groups
            for j in range(len(g.engines))
        ]

    @property
    def engine_parallel_configs(self) -> list[dict[str, Any]]:
        return [g.parallel_config() for g in self.server_groups for _ in g.engines]

    def recover(self) -> None:
        """Recover dead engines across all groups (rollout.py:286-327): start the missing ones,
        then release and resume their memory so that the weight update fills them."""
        dead_per_group = [
            [i for i, engine in enumerate(g.all_engines) if engine is None]
            for g in self.server_groups
        ]
        all_handles: list[Any] = []
        port_cursors: dict[int, int] = {}
        for g in self.server_groups:
            handles, port_cursors = g.start_engines(port_cursors)
            all_handles.extend(handles)
        if all_handles:
            ray.get(all_handles)
        release_handles: list[Any] = []
        new_engines: list[Any] = []
        for g, dead_indices in zip(self.server_groups, dead_per_group, strict=True):
            logger.info(
                f"Recovered {g.num_new_engines} dead rollout engines (worker_type={g.worker_type})"
            )
            assert g.num_new_engines == len(dead_indices), "num_new_engines != dead_indices"
            if g.needs_offload and dead_indices:
                engines = [g.all_engines[i] for i in dead_indices]
                release_handles.extend(e.release_memory_occupation.remote() for e in engines)
                new_engines.extend(engines)
        if release_handles:
            ray.get(release_handles)
            ray.get(
                [
                    e.resume_memory_occupation.remote(tags=[GPU_MEMORY_TYPE_WEIGHTS])
                    for e in new_engines
                ]
            )

    def offload(self) -> list[Any]:
        handles: list[Any] = []
        for g in self.server_groups:
            handles.extend(g.offload())
        return list(ray.get(handles)) if handles else []

    def onload(self, tags: list[str] | None = None) -> list[Any]:
        handles: list[Any] = []
        for g in self.server_groups:
            handles.extend(g.onload(tags))
        return list(ray.get(handles)) if handles else []

    def onload_weights(self) -> list[Any]:
        handles: list[Any] = []
        for g in self.server_groups:
            if g.needs_offload:
                handles.extend(g.onload(tags=[GPU_MEMORY_TYPE_WEIGHTS]))
        return list(ray.get(handles)) if handles else []

    def onload_kv(self) -> list[Any]:
        handles: list[Any] = []
        for g in self.server_groups:
            handles.extend(g.onload(tags=[GPU_MEMORY_TYPE_KV_CACHE, GPU_MEMORY_TYPE_CUDA_GRAPH]))
        return list(ray.get(handles)) if handles else []


@ray.remote
class RolloutManager:
    """The class to run rollout and convert rollout data to training data."""

    def __init__(self, args: argparse.Namespace, pg: Any, deployment: Any = None) -> None:
        # slime main 624b824, slime/ray/rollout.py:370-417
        configure_logger()
        self.pg = pg
        self.args = args
        rollout_init_handles: list[Any] = []
        init_http_client(args)
        self.servers: dict[str, RolloutServer]
        if deployment is not None:
            # slime's next layout (slime/ray/serving.py): the ServingCluster started the routers
            # and the engines; this manager takes its servers and its routers' addresses
            self.servers = deployment.servers
            for name, value in deployment.routers.items():
                setattr(args, name, value)
        else:
            self.servers, rollout_init_handles = start_rollout_servers(args, pg)
        start_session_server(args)  # miles's rollout_manager.py:104 (--use-session-server)
        self.data_source = RolloutDataSourceWithBuffer(args)
        self.generate_rollout = generate_rollout
        self.eval_generate_rollout = generate_rollout
        logger.info(
            "import slime.rollout.sglang_rollout.generate_rollout as generate_rollout function."
        )
        if rollout_init_handles:
            ray.get(rollout_init_handles)
        lock_cls: Any = Lock
        self.rollout_engine_lock = lock_cls.options(num_cpus=0, num_gpus=0).remote()
        self.rollout_id = -1
        self.train_parallel_config: dict[str, Any] = {"dp_size": 1}
        # the version of the weights the engines serve, set by train rank 0 after each weight
        # update (miles 31f1ca961, rollout_manager.py:386 `set_weight_version`, called from
        # megatron_utils/actor.py:781)
        self.weight_version = 0
        self._weight_version_changed = threading.Condition()
        self._health_monitors: list[RolloutHealthMonitor] = []
        if args.use_fault_tolerance:
            for srv in self.servers.values():
                for group in srv.server_groups:
                    monitor = RolloutHealthMonitor(group, args)
                    monitor.start()
                    self._health_monitors.append(monitor)

    def dispose(self) -> None:
        for monitor in self._health_monitors:
            monitor.stop()
        ray.get([engine.shutdown.remote() for engine in self.rollout_engines])

    @property
    def server(self) -> RolloutServer | None:
        """Default server (first model), as rollout.py:450-455."""
        return next(iter(self.servers.values()), None)

    def _get_updatable_server(self) -> RolloutServer | None:
        for srv in self.servers.values():
            if srv.update_weights:
                return srv
        return None

    @property
    def rollout_engines(self) -> list[Any]:
        """All node-0 engines across all servers / models (rollout.py:468-471)."""
        return [e for srv in self.servers.values() for e in srv.engines]

    def get_updatable_engines_and_lock(
        self,
    ) -> tuple[list[Any], Any, int, list[int], list[int], list[dict[str, Any]]]:
        """rollout.py:473-486: the updatable server's engines, the lock, the number of new
        engines, and per engine its GPU count, GPU offset and parallel config."""
        srv = self._get_updatable_server()
        engines = srv.engines if srv else []
        gpu_counts = srv.engine_gpu_counts if srv else []
        gpu_offsets = srv.engine_gpu_offsets if srv else []
        parallel_configs = srv.engine_parallel_configs if srv else []
        num_new = srv.num_new_engines if srv else 0
        return engines, self.rollout_engine_lock, num_new, gpu_counts, gpu_offsets, parallel_configs

    def recover_updatable_engines(self) -> None:
        """rollout.py:553-564: pause the health monitors, then restart dead updatable engines
        before the next weight update (train rank 0 calls it under --use-fault-tolerance)."""
        # demo fault weight_sync_health_check_queued: the fork's slip is in the weight updater,
        # which resumes the monitors as soon as it has posted the update (see
        # update_weight_from_distributed.py), not here
        self.health_monitoring_pause()
        srv = self._get_updatable_server()
        if self.rollout_id == -1 or srv is None:
            return
        srv.recover()

    def clear_updatable_num_new_engines(self) -> None:
        # when fault tolerance is not enabled, we need to manually clear num_new_engines after
        # update_weights (rollout.py:566-570)
        srv = self._get_updatable_server()
        if srv:
            srv.num_new_engines = 0

    def health_monitoring_pause(self) -> None:
        for monitor in self._health_monitors:
            monitor.pause()

    def health_monitoring_resume(self) -> None:
        for monitor in self._health_monitors:
            monitor.resume()

    def save(self, rollout_id: int) -> None:
        return None  # the demo's data source keeps no state

    def load(self, rollout_id: int | None = None) -> None:
        return None

    def get_num_rollout_per_epoch(self) -> int:
        return int(len(self.data_source.dataset) // self.args.rollout_batch_size)

    def set_train_parallel_config(self, config: dict[str, Any]) -> None:
        self.train_parallel_config = config

    def set_weight_version(self, weight_version: int) -> None:
        with self._weight_version_changed:
            self.weight_version = weight_version
            self._weight_version_changed.notify_all()

    def _wait_for_weight_version(self, rollout_id: int) -> None:
        """A fork's rollout gate (--max-weight-staleness; NeMo-RL's collector waits the same way
        for the trainer's set_weight_version, async_utils/trajectory_collector.py
        `_generation_limit_cleared.wait()`): rollout `rollout_id` starts only once the engines
        serve the weights trained on rollout `rollout_id - 1 - staleness` (version 1 is the first
        update, before any training)."""
        needed = rollout_id + 1 - self.args.max_weight_staleness
        with self._weight_version_changed:
            if self.weight_version < needed and fault_armed(
                self.args, "update_waits_behind_rollout_gate", rollout_id - 1
            ):
                log_fault_armed(
                    logger,
                    self.args.fault,
                    f"generate({rollout_id}) waiting for weight version {needed} (engines serve "
                    f"{self.weight_version})",
                    rollout_id - 1,
                )
            self._weight_version_changed.wait_for(lambda: self.weight_version >= needed)

    def generate(self, rollout_id: int) -> list[Box]:
        start_time = time.time()
        if self.args.max_weight_staleness is not None:
            self._wait_for_weight_version(rollout_id)
        self.rollout_id = rollout_id
        self.health_monitoring_resume()
        if fault_armed(self.args, "engine_server_killed", rollout_id) or fault_armed(
            self.args, "rollout_tp_rank_killed", rollout_id
        ):
            # demo fault plan: the engine's server dies at its first request of this rollout
            engine = self.rollout_engines[self.args.fault_engine]
            where = f"the rollout's requests to engine {self.args.fault_engine}"
            wait_until_server_fault_live(self.args, engine, rollout_id, where)
        if (
            fault_arms_at(self.args, "rollout_engine_stuck", rollout_id)
            or fault_armed(self.args, "serving_cluster_engine_stuck", rollout_id)
            or fault_armed(self.args, "rollout_tp_rank_prefetch_stuck", rollout_id)
            or fault_armed(self.args, "engine_detokenizer_stalled", rollout_id)
            or fault_armed(self.args, "rollout_tp_ranks_diverged", rollout_id)
            or fault_armed(self.args, "rollout_tp_rank_stuck", rollout_id)
        ):
            # demo fault plan: the engine's scheduler blocks at its next decode step, which is
            # one of this rollout's requests that the router sends it
            engine = self.rollout_engines[self.args.fault_engine]
            where = f"rollout requests to engine {self.args.fault_engine}"
            wait_until_server_fault_live(self.args, engine, rollout_id, where)
        data = self._get_rollout_data(rollout_id=rollout_id)
        rewards = [s.reward or 0.0 for s in data]
        logger.info(
            f"perf {rollout_id}: {{'rollout/time': {time.time() - start_time:.2f}, "
            f"'rollout/samples': {len(data)}, 'rollout/raw_reward': {sum(rewards) / max(len(rewards), 1):.3f}}}"
        )
        train_data = self._convert_samples_to_train_data(data)
        train_data["rollout_id"] = rollout_id
        return self._split_train_data_by_dp(train_data, self.train_parallel_config["dp_size"])

    def eval(self, rollout_id: int) -> None:
        self.health_monitoring_resume()
        if fault_armed(self.args, "eval_hang", rollout_id):
            # demo fault plan: the engine's scheduler blocks at its next decode step, an eval one
            engine = self.rollout_engines[self.args.fault_engine]
            where = f"eval requests to engine {self.args.fault_engine}"
            wait_until_server_fault_live(self.args, engine, rollout_id, where)
        result = call_rollout_fn(
            self.eval_generate_rollout, self.args, rollout_id, self.data_source, evaluation=True
        )
        for name, values in result.data.items():
            rewards = values["rewards"]
            logger.info(
                f"eval {rollout_id}: {{'eval/{name}': {sum(rewards) / max(len(rewards), 1):.3f}}}"
            )

    def offload(self) -> None:
        # rollout.py:536-539
        self.health_monitoring_pause()
        if self.rollout_id >= 0 and fault_armed(self.args, "offload_hang", self.rollout_id):
            engine = self.rollout_engines[self.args.fault_engine]
            where = f"release_memory_occupation of engine {self.args.fault_engine}"
            wait_until_server_fault_live(self.args, engine, self.rollout_id, where)
        if self.rollout_id >= 0 and fault_armed(self.args, "offload_pause_stuck", self.rollout_id):
            engine = self.rollout_engines[self.args.fault_engine]
            where = f"the offload's pause_generation of engine {self.args.fault_engine}"
            wait_until_server_fault_live(self.args, engine, self.rollout_id, where)
        for srv in self.servers.values():
            srv.offload()

    def onload(self, tags: list[str] | None = None) -> None:
        for srv in self.servers.values():
            srv.onload(tags)

    def onload_weights(self) -> None:
        for srv in self.servers.values():
            srv.onload_weights()

    def onload_kv(self) -> None:
        for srv in self.servers.values():
            srv.onload_kv()

    def _get_rollout_data(self, rollout_id: int) -> list[Sample]:
        output = call_rollout_fn(
            self.generate_rollout, self.args, rollout_id, self.data_source, evaluation=False
        )
        data = [s for group in output.samples for s in group]
        global_batch_size = self.args.global_batch_size
        if len(data) % global_batch_size != 0:
            trim_len = (len(data) // global_batch_size) * global_batch_size
            logger.info(f"trim number of samples from {len(data)} to {trim_len}")
            data = data[:trim_len]
        logger.info(f"Final collected {len(data)} samples from rollout to train")
        return data

    def _post_process_rewards(self, samples: list[Sample]) -> tuple[list[float], list[float]]:
        """GRPO: normalise rewards within each prompt's group."""
        raw = [float(s.reward or 0.0) for s in samples]
        n = self.args.n_samples_per_prompt
        out: list[float] = []
        for i in range(0, len(raw), n):
            group = raw[i : i + n]
            mean = sum(group) / len(group)
            out.extend(r - mean for r in group)
        return raw, out

    def _convert_samples_to_train_data(self, samples: list[Sample]) -> dict[str, Any]:
        if self.args.custom_convert_samples_to_train_data_path:
            if self.args.fault == "rollout_data_plasma_full":
                where = "the custom convert_samples_to_train_data (a Ray task per DP shard)"
                log_fault_armed(logger, self.args.fault, where, self.rollout_id)
            convert = load_function(self.args.custom_convert_samples_to_train_data_path)
            return dict(convert(self.args, samples))
        raw_rewards, rewards = self._post_process_rewards(samples)
        return {
            "tokens": [s.tokens for s in samples],
            "response_lengths": [s.response_length for s in samples],
            "rewards": rewards,
            "raw_reward": raw_rewards,
            "truncated": [1 if s.status == Sample.Status.TRUNCATED else 0 for s in samples],
            "sample_indices": [s.index for s in samples],
            "loss_masks": [s.loss_mask or [1] * s.response_length for s in samples],
        }

    def _split_train_data_by_dp(self, data: dict[str, Any], dp_size: int) -> list[Box]:
        """Each DP rank's share and its micro-batch schedule: `num_microbatches` holds one entry
        per training step (slime main 624b824, rollout.py:757-800 and utils/dp_schedule.py:82,
        whose invariant is that every DP rank runs the same number of steps and micro-batches;
        the demo's batch is one step of one micro-batch per rank)."""
        total_lengths = [len(t) for t in data["tokens"]]
        data["total_lengths"] = total_lengths
        num_microbatches = [1]
        refs: list[Box] = []
        for i in range(dp_size):
            partition = list(range(i, len(total_lengths), dp_size))
            part: dict[str, Any] = {"partition": partition, "rollout_id": data["rollout_id"]}
            part["num_microbatches"] = list(num_microbatches)
            if i == self.args.fault_rank and fault_armed(
                self.args, "train_rank_extra_step", data["rollout_id"]
            ):
                # demo fault: a schedule that breaks the invariant (as a custom split that packs
                # each rank's samples on its own would): this rank gets one more training step
                part["num_microbatches"].append(1)
                log_fault_armed(
                    logger,
                    self.args.fault,
                    f"the DP schedule (train rank {i} gets {len(part['num_microbatches'])} "
                    f"steps, its peers {len(num_microbatches)})",
                    data["rollout_id"],
                )
            for key in (
                "tokens",
                "response_lengths",
                "rewards",
                "truncated",
                "loss_masks",
                "sample_indices",
            ):
                part[key] = [data[key][j] for j in partition]
            for key in ("raw_reward", "total_lengths"):
                part[key] = data[key]
            refs.append(Box(ray.put(part)))
        return refs


def _start_router(args: argparse.Namespace) -> tuple[str, int]:
    """Start sgl-router as slime does: `_start_router` in slime/ray/rollout.py (January layout
    6485964, lines 634-675, called from RolloutManager.__init__ at line 51; slime main 624b824,
    lines 916-968, called from start_rollout_servers at line 1019). A `multiprocessing.Process` with the default start method (fork on Linux), so
    the child keeps this constructor's frames below `run_router`, the title Ray gave this actor
    and the actor's environment. Health checks and the circuit breaker off, a Prometheus port, as
    slime main does (lines 941-954)."""
    if args.sglang_router_ip is not None:
        return args.sglang_router_ip, args.sglang_router_port

    args.sglang_router_ip = get_current_node_ip()
    if args.sglang_router_port is None:
        args.sglang_router_port = get_free_port(random.randint(3000, 4000))

    from sglang_router.launch_router import RouterArgs  # type: ignore[import-untyped]

    from slime.utils.http_utils import run_router

    router_args = RouterArgs.from_cli_args(args, use_router_prefix=True)
    router_args.host = args.sglang_router_ip
    router_args.port = args.sglang_router_port
    router_args.prometheus_port = get_free_port(random.randint(4000, 5000))
    router_args.request_timeout_secs = args.sglang_router_request_timeout_secs

    # Disable circuit breaker to prevent RDMA transfer timeouts from
    # marking decode workers as dead. (slime main rollout.py:947-950)
    router_args.disable_circuit_breaker = True

    # We will not use the health check from router.
    if hasattr(router_args, "disable_health_check"):
        router_args.disable_health_check = True

    logger.info(f"Launch router with args: {router_args}")

    # Demo only (no frame of it in the child's stack): the router dies with this actor, as the
    # stand-in engines do with theirs, so that a stopped demo leaves no router behind.
    die_with_parent_after_fork()
    process = multiprocessing.Process(
        target=run_router,
        args=(router_args,),
    )
    process.daemon = True  # Set the process as a daemon
    process.start()
    # Wait 3 seconds
    time.sleep(3)
    assert process.is_alive()
    logger.info(
        f"Router launched at {args.sglang_router_ip}:{args.sglang_router_port}, "
        f"Prometheus port: {router_args.prometheus_port}"
    )
    return args.sglang_router_ip, args.sglang_router_port


def start_rollout_servers(
    args: argparse.Namespace, pg: Any
) -> tuple[dict[str, RolloutServer], list[Any]]:
    """Start the rollout servers without waiting for the engines' init (slime main 624b824,
    slime/ray/rollout.py:987-1126): one router per model (`_start_router`), its server groups'
    engines started (`ServerGroup.start_engines`), the pending `engine.init` refs returned. The
    demo serves one model, "default", in one "regular" group."""
    servers: dict[str, RolloutServer] = {}
    pending_init_handles: list[Any] = []
    router_ip, router_port = _start_router(args)
    num_gpus_per_engine = args.rollout_num_gpus_per_engine
    num_engines = args.rollout_num_gpus // min(num_gpus_per_engine, args.num_gpus_per_node)
    group = ServerGroup(
        args=args,
        pg=pg,
        all_engines=[None] * num_engines,
        num_gpus_per_engine=num_gpus_per_engine,
        num_new_engines=0,
        worker_type="regular",
        needs_offload=bool(args.offload_rollout),  # colocated: every group overlaps megatron
        model_path=args.hf_checkpoint,
        router_ip=router_ip,
        router_port=router_port,
    )
    handles, _port_cursors = group.start_engines({})
    pending_init_handles.extend(handles)
    servers["default"] = RolloutServer(
        server_groups=[group], router_ip=router_ip, router_port=router_port, model_name="default"
    )
    args.sglang_model_routers = {
        name: (srv.router_ip, srv.router_port) for name, srv in servers.items()
    }
    return servers, pending_init_handles


def _allocate_rollout_engine_addr_and_ports_normal(
    *,
    args: argparse.Namespace,
    rollout_engines: list[tuple[int, Any]],
    base_port: int,
    nodes_per_engine: int = 1,
) -> tuple[dict[int, dict[str, Any]], dict[int, int]]:
    """Server port and NCCL port per engine actor, counted up from `base_port`
    (--sglang-base-port, 15000); returns them and the next free port per node (rollout.py:827-913).
    An engine on several nodes (one actor per node, consecutive ranks) has one `dist_init_addr`,
    taken on its first node and given to all of its actors (rollout.py:896-903)."""
    taken: set[int] = set()
    addr_and_ports: dict[int, dict[str, Any]] = {}
    next_port = base_port
    dist_init_addr = ""
    for rank, engine in rollout_engines:
        # an engine on several nodes: each of its actors serves on its node's address, and they
        # meet at the first one's (slime: `get_addr()`, the actor's node IP, rollout.py:878-880,
        # 896-903)
        host = args.sglang_host if nodes_per_engine == 1 else ray.get(engine._get_node_ip.remote())
        port = get_free_port(start_port=next_port, taken=taken)
        taken.add(port)
        nccl_port = get_free_port(start_port=port + 1, taken=taken)
        taken.add(nccl_port)
        next_port = nccl_port + 1
        if rank % nodes_per_engine == 0:  # the engine's first node
            dist_port = get_free_port(start_port=nccl_port + 1, taken=taken)
            taken.add(dist_port)
            next_port = dist_port + 1
            dist_init_addr = f"{host}:{dist_port}"
        addr_and_ports[rank] = {
            "host": host,
            "port": port,
            "nccl_port": nccl_port,
            "dist_init_addr": dist_init_addr,
        }
        logger.info(f"Ports for engine {rank}: {addr_and_ports[rank]}")
    return addr_and_ports, {0: next_port}
