"""`RolloutManager`: owns the SGLang engines, runs rollouts and turns samples into train data."""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import random
import time
from typing import Any

import ray
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from slime.backends.sglang_utils.sglang_engine import SGLangEngine, wait_until_server_fault_live
from slime.ray.utils import Lock
from slime.rollout.base_types import call_rollout_fn
from slime.rollout.data_source import RolloutDataSourceWithBuffer
from slime.rollout.sglang_rollout import generate_rollout
from slime.utils.health_monitor import RolloutHealthMonitor
from slime.utils.http_utils import init_http_client
from slime.utils.logging_utils import configure_logger, log_fault_armed
from slime.utils.misc import (
    Box,
    die_with_parent_after_fork,
    fault_armed,
    get_current_node_ip,
    get_free_port,
    load_function,
)
from slime.utils.types import Sample

logger = logging.getLogger(__name__)

GPU_MEMORY_TYPE_WEIGHTS = "weights"
GPU_MEMORY_TYPE_KV_CACHE = "kv_cache"
GPU_MEMORY_TYPE_CUDA_GRAPH = "cuda_graph"


@ray.remote
class RolloutManager:
    """The class to run rollout and convert rollout data to training data."""

    def __init__(self, args: argparse.Namespace, pg: Any) -> None:
        configure_logger()
        self.args = args
        self.pg = pg
        _start_router(args)
        init_http_client(args)
        self.data_source = RolloutDataSourceWithBuffer(args)
        self.generate_rollout = generate_rollout
        self.eval_generate_rollout = generate_rollout
        logger.info(
            "import slime.rollout.sglang_rollout.generate_rollout as generate_rollout function."
        )
        self.all_rollout_engines: list[Any] = [None] * args.num_engines
        self.num_new_engines = init_rollout_engines(args, pg, self.all_rollout_engines)
        lock_cls: Any = Lock
        self.rollout_engine_lock = lock_cls.options(num_cpus=0, num_gpus=0).remote()
        self.rollout_id = -1
        self.train_parallel_config: dict[str, Any] = {"dp_size": 1}
        self._health_monitor: RolloutHealthMonitor | None = None
        if args.use_fault_tolerance:
            self._health_monitor = RolloutHealthMonitor(self, args)
            self._health_monitor.start()

    def dispose(self) -> None:
        ray.get([engine.shutdown.remote() for engine in self.rollout_engines])

    @property
    def rollout_engines(self) -> list[Any]:
        return self.all_rollout_engines

    def get_updatable_engines_and_lock(self) -> tuple[list[Any], Any, int]:
        return self.rollout_engines, self.rollout_engine_lock, self.num_new_engines

    def clear_num_new_engines(self) -> None:
        self.num_new_engines = 0

    def get_num_rollout_per_epoch(self) -> int:
        return int(len(self.data_source.dataset) // self.args.rollout_batch_size)

    def set_train_parallel_config(self, config: dict[str, Any]) -> None:
        self.train_parallel_config = config

    def generate(self, rollout_id: int) -> list[Box]:
        start_time = time.time()
        self.rollout_id = rollout_id
        if self._health_monitor is not None:
            self._health_monitor.resume()
        if fault_armed(self.args, "engine_server_killed", rollout_id):
            # demo fault plan: the engine's server dies at its first request of this rollout
            engine = self.rollout_engines[self.args.fault_engine]
            where = f"the rollout's requests to engine {self.args.fault_engine}"
            wait_until_server_fault_live(self.args, engine, rollout_id, where)
        if fault_armed(self.args, "rollout_engine_stuck", rollout_id) or fault_armed(
            self.args, "rollout_tp_rank_prefetch_stuck", rollout_id
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

    def offload(self) -> list[Any]:
        if self._health_monitor is not None:
            self._health_monitor.pause()
        if self.rollout_id >= 0 and fault_armed(self.args, "offload_hang", self.rollout_id):
            engine = self.rollout_engines[self.args.fault_engine]
            where = f"release_memory_occupation of engine {self.args.fault_engine}"
            wait_until_server_fault_live(self.args, engine, self.rollout_id, where)
        return list(
            ray.get([engine.release_memory_occupation.remote() for engine in self.rollout_engines])
        )

    def onload(self, tags: list[str] | None = None) -> list[Any]:
        return list(
            ray.get(
                [
                    engine.resume_memory_occupation.remote(tags=tags)
                    for engine in self.rollout_engines
                ]
            )
        )

    def onload_weights(self) -> None:
        self.onload(tags=[GPU_MEMORY_TYPE_WEIGHTS])

    def onload_kv(self) -> None:
        self.onload(tags=[GPU_MEMORY_TYPE_KV_CACHE, GPU_MEMORY_TYPE_CUDA_GRAPH])

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
        total_lengths = [len(t) for t in data["tokens"]]
        data["total_lengths"] = total_lengths
        refs: list[Box] = []
        for i in range(dp_size):
            partition = list(range(i, len(total_lengths), dp_size))
            part: dict[str, Any] = {"partition": partition, "rollout_id": data["rollout_id"]}
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


def _start_router(args: argparse.Namespace) -> None:
    """Start sgl-router as slime does: `_start_router` in slime/ray/rollout.py (January layout
    6485964, lines 634-675, called from RolloutManager.__init__ at line 51; slime main 624b824,
    lines 916-968). A `multiprocessing.Process` with the default start method (fork on Linux), so
    the child keeps this constructor's frames below `run_router`, the title Ray gave this actor
    and the actor's environment. Health checks and the circuit breaker off, a Prometheus port, as
    slime main does (lines 941-954)."""
    if args.sglang_router_ip is not None:
        return

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


def init_rollout_engines(args: argparse.Namespace, pg: Any, all_rollout_engines: list[Any]) -> int:
    num_gpu_per_engine = min(args.rollout_num_gpus_per_engine, args.num_gpus_per_node)
    num_engines = args.rollout_num_gpus // num_gpu_per_engine
    assert len(all_rollout_engines) == num_engines
    pg, reordered_bundle_indices, reordered_gpu_ids = pg
    rollout_ray_actor: Any = ray.remote(SGLangEngine)
    rollout_engines = []
    for i in range(num_engines):
        if all_rollout_engines[i] is not None:
            continue
        scheduling_strategy = PlacementGroupSchedulingStrategy(
            placement_group=pg,
            placement_group_capture_child_tasks=True,
            placement_group_bundle_index=reordered_bundle_indices[i * num_gpu_per_engine],
        )
        env_vars = {
            "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION": "false",
            "SGLANG_MEMORY_SAVER_CUDA_GRAPH": "true",
            "OMP_NUM_THREADS": "1",
        }
        if args.fault == "rollout_behind_proxy":
            # Demo: the engines run where the master node's proxy is not set. Ray's child actors
            # inherit the RolloutManager's runtime_env env_vars: clear the proxy ones here (an
            # empty value means no proxy to requests and httpx).
            env_vars.update(dict.fromkeys(("http_proxy", "HTTP_PROXY", "no_proxy", "NO_PROXY"), ""))
        engine = rollout_ray_actor.options(
            num_cpus=0,
            num_gpus=0,
            scheduling_strategy=scheduling_strategy,
            runtime_env={"env_vars": env_vars},
        ).remote(args, rank=i, base_gpu_id=int(reordered_gpu_ids[i * num_gpu_per_engine]))
        rollout_engines.append((i, engine))
        all_rollout_engines[i] = engine
    if not rollout_engines:
        return 0
    addr_and_ports = _allocate_rollout_engine_addr_and_ports_normal(
        args=args, rollout_engines=rollout_engines
    )
    args.rollout_engine_urls = [
        f"http://{addr_and_ports[rank]['host']}:{addr_and_ports[rank]['port']}"
        for rank in range(num_engines)
    ]
    init_handles = [engine.init.remote(**addr_and_ports[rank]) for rank, engine in rollout_engines]
    ray.get(init_handles)
    return len(rollout_engines)


def _allocate_rollout_engine_addr_and_ports_normal(
    *, args: argparse.Namespace, rollout_engines: list[tuple[int, Any]]
) -> dict[int, dict[str, Any]]:
    """Server port and NCCL port per engine, counted up from --sglang-base-port (15000)."""
    taken: set[int] = set()
    addr_and_ports: dict[int, dict[str, Any]] = {}
    next_port = args.sglang_base_port
    for rank, _engine in rollout_engines:
        port = get_free_port(start_port=next_port, taken=taken)
        taken.add(port)
        nccl_port = get_free_port(start_port=port + 1, taken=taken)
        taken.add(nccl_port)
        dist_port = get_free_port(start_port=nccl_port + 1, taken=taken)
        taken.add(dist_port)
        next_port = dist_port + 1
        addr_and_ports[rank] = {
            "host": args.sglang_host,
            "port": port,
            "nccl_port": nccl_port,
            "dist_init_addr": f"{args.sglang_host}:{dist_port}",
        }
        logger.info(f"Ports for engine {rank}: {addr_and_ports[rank]}")
    return addr_and_ports
