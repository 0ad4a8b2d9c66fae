"""`SGLangEngine`: the Ray actor that launches one SGLang HTTP server (a multiprocessing SPAWN child)
and drives it over HTTP with `requests` (no timeouts, as slime)."""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import os
import tempfile
import time
from collections.abc import Callable
from typing import Any

from slime.observability.logging_utils import configure_logger, log_fault_armed
from slime.ray.ray_actor import RayActor
from slime.utils.arguments import SERVER_PASSTHROUGH

logger = logging.getLogger(__name__)

# The demo's fault plan for the engines: demo fault -> stand-in server fault. Timed ones go live
# when the job creates their arm file at the armed step (`wait_until_server_fault_live`; they must
# spare the start-up calls: the weight-update group, the first offload, the warm-up); the others
# are live from the start. The router spreads every rollout over every engine, so a fault of the
# rollout's own requests (a stuck decode step) is armed at its step too.
SERVER_FAULTS: dict[str, str] = {
    "startup_engine_never_healthy": "never_healthy",
    "startup_engine_warmup_stuck": "stuck_prefill",
    "startup_engine_warmup_stuck_colocate": "stuck_prefill",
    "rollout_engine_stuck": "stuck_scheduler",
    "eval_hang": "stuck_scheduler",
    "offload_hang": "hang_release_memory_occupation",
    "colocate_update_hang": "hang_update_weights_from_tensor",
    "weight_sync_engine_missing": "skip_weight_sync",
    "engine_paused_by_update": "stay_paused_after_update",
    "weight_sync_engine_wedged": "stuck_before_weight_broadcast",
    "weight_sync_health_check_queued": "stuck_before_weight_broadcast",
    "engine_server_killed": "killed_mid_generate",
    "rollout_tp_rank_prefetch_stuck": "prefetch_check_diverged",
    "engine_detokenizer_stalled": "detokenizer_stalled",
    "weight_load_slow_storage": "slow_weight_storage",
    "weight_update_session_stuck": "stuck_begin_weight_update",
    "serving_cluster_engine_stuck": "stuck_scheduler",
    "startup_tp_rank_killed": "tp_rank_killed_at_launch",
    "rollout_tp_rank_killed": "tp_rank_killed",
    "rollout_tp_ranks_diverged": "running_timeout_diverged",
    "rollout_tp_rank_stuck": "tp_rank_stuck",
    # issue 45 item 5
    "offload_pause_stuck": "hang_pause_generation",
    "update_pause_orphaned": "pause_continue_shared_future",
}
PLAN_MISSED_TEXT = "DEMO FAULT PLAN MISSED"
TIMED_SERVER_FAULTS = frozenset(
    {
        "stuck_scheduler",
        "skip_weight_sync",
        "hang_release_memory_occupation",
        "stay_paused_after_update",
        "stuck_before_weight_broadcast",
        "killed_mid_generate",
        "prefetch_check_diverged",
        "detokenizer_stalled",
        "slow_weight_storage",
        "stuck_begin_weight_update",
        "tp_rank_killed",
        "running_timeout_diverged",
        "tp_rank_stuck",
        "hang_pause_generation",
        "pause_continue_shared_future",
    }
)
# demo faults whose engine fault goes live right before a weight broadcast
WEIGHT_SYNC_FAULTS = (
    "weight_sync_engine_missing",
    "weight_sync_engine_wedged",
    "weight_sync_health_check_queued",
)
# demo faults whose engine fault goes live right before miles's weight-update session opens
WEIGHT_SESSION_FAULTS = ("weight_update_session_stuck",)


def server_fault_delay_s(args: argparse.Namespace) -> float:
    """When a timed server fault goes live, in seconds after the server is up."""
    return float(args.fault_timed_delay_s + args.fault_after_steps * args.fault_timed_step_s)


def wait_until_server_fault_live(
    args: argparse.Namespace, engine: Any, step: int, where: str
) -> None:
    """Demo fault plan: at the armed step, make `engine`'s server fault live (its arm file)."""
    import ray

    if not ray.get(engine.arm_server_fault.remote()):
        fault_at = ray.get(engine.get_server_fault_at.remote())
        if fault_at is not None:
            time.sleep(max(0.0, fault_at + 0.5 - time.time()))
    log_fault_armed(logger, args.fault, where, step)


def check_server_fault_not_live(args: argparse.Namespace, engine: Any) -> None:
    """Demo fault plan: a timed server fault must still be pending when the job makes the calls
    it must spare (a slow start-up can miss it); say so loudly when it is not."""
    import ray

    fault_at = ray.get(engine.get_server_fault_at.remote())
    if fault_at is not None and time.time() > fault_at - 0.5:
        logger.error(
            f"{PLAN_MISSED_TEXT}: {args.fault} went live before start-up finished "
            f"(raise --fault-timed-delay-s, now {args.fault_timed_delay_s}s)"
        )


def server_faults() -> tuple[str, ...]:
    """The faults the SGLang stand-in server knows."""
    from slime_hangdoctor_demo.sglang_server import FAULTS

    return tuple(FAULTS)


def launch_server_process(
    server_args: list[str], base_url: str, api_key: str | None, node_rank: int = 0
) -> Any:
    from slime_hangdoctor_demo.sglang_server import launch_server

    multiprocessing.set_start_method("spawn", force=True)
    p = multiprocessing.Process(target=launch_server, args=(server_args,))
    p.start()
    if node_rank != 0:
        return p  # slime 624b824 sglang_engine.py:55-56: only node rank 0 is waited for
    _wait_server_healthy(base_url=base_url, api_key=api_key, is_process_alive=p.is_alive)
    return p


def _wait_server_healthy(
    base_url: str, api_key: str | None, is_process_alive: Callable[[], bool]
) -> None:
    """Poll GET /health_generate every 2 s until 200; no timeout, only a dead process stops it."""
    import requests

    headers = {"Content-Type": "application/json; charset=utf-8"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    with requests.Session() as session:
        while True:
            try:
                response = session.get(f"{base_url}/health_generate", headers=headers)
                if response.status_code == 200:
                    break
            except requests.RequestException:
                pass
            if not is_process_alive():
                raise Exception("Server process terminated unexpectedly.")
            time.sleep(2)
        while True:
            try:
                response = session.get(f"{base_url}/flush_cache", headers=headers)
                if response.status_code == 200:
                    break
            except requests.RequestException:
                pass
            if not is_process_alive():
                raise Exception("Server process terminated unexpectedly.")
            time.sleep(2)


class SGLangEngine(RayActor):
    def __init__(
        self,
        args: argparse.Namespace,
        rank: int,
        worker_type: str = "regular",
        base_gpu_id: int = 0,
    ) -> None:
        configure_logger()
        self.args = args
        self.rank = rank
        self.worker_type = worker_type
        self.base_gpu_id = base_gpu_id
        # slime 624b824 sglang_engine.py:523-524 (`_compute_server_args`): an engine wider than a
        # node runs on `nnodes` nodes, one actor each, consecutive ranks
        self.nnodes = max(1, args.rollout_num_gpus_per_engine // args.num_gpus_per_node)
        self.node_rank = rank % self.nnodes
        self.engine_index = rank // self.nnodes  # the demo's engine number (`--fault-engine`)
        self.process: Any = None
        self.server_fault_at: float | None = None
        self.fault_arm_file: str | None = None
        self.router_ip: str | None = None
        self.router_port: int | None = None

    def init(
        self,
        dist_init_addr: str,
        port: int,
        nccl_port: int,
        host: str | None = None,
        router_ip: str | None = None,
        router_port: int | None = None,
    ) -> None:
        self.server_host = host or "127.0.0.1"
        self.server_port = port
        self.dist_init_addr = dist_init_addr
        self.nccl_port = nccl_port
        # slime main 624b824 sglang_engine.py:115-116
        self.router_ip = router_ip if router_ip is not None else self.args.sglang_router_ip
        self.router_port = router_port if router_port is not None else self.args.sglang_router_port
        self._init_normal(self._server_args())

    def _server_args(self) -> list[str]:
        args = self.args
        argv = [
            "--host",
            self.server_host,
            "--port",
            str(self.server_port),
            "--step-s",
            str(args.sglang_step_s),
        ]
        if args.rollout_num_gpus_per_engine > 1:  # slime: tp_size = rollout_num_gpus_per_engine
            argv += ["--tp-size", str(args.rollout_num_gpus_per_engine)]
        if self.nnodes > 1:  # slime 624b824 sglang_engine.py:537-539
            argv += ["--nnodes", str(self.nnodes), "--node-rank", str(self.node_rank)]
            argv += ["--dist-init-addr", self.dist_init_addr]
        argv.append("--exit-with-parent")  # stand-in flag: no engine outlives a killed actor
        if args.colocate:
            argv.append("--enable-memory-saver")
        if args.sglang_api_key:
            argv += ["--api-key", args.sglang_api_key]
        for field in SERVER_PASSTHROUGH:
            value = getattr(args, f"sglang_{field}", None)
            if value is not None:
                argv += [f"--{field.replace('_', '-')}", value]
        if args.sglang_request_log_dir:
            argv += [
                "--request-log",
                os.path.join(args.sglang_request_log_dir, f"engine{self.rank}.jsonl"),
            ]
        fault = SERVER_FAULTS.get(args.fault) if self.engine_index == args.fault_engine else None
        if fault and fault not in server_faults():
            logger.error(
                f"the SGLang stand-in has no fault {fault!r}: {args.fault} cannot be armed"
            )
            fault = None
        if fault:
            argv += ["--fault", fault]
            if fault in TIMED_SERVER_FAULTS:
                # armed at run time: the job creates this file at the armed step
                self.fault_arm_file = os.path.join(
                    tempfile.mkdtemp(prefix="demo-fault-"), f"engine{self.rank}.arm"
                )
                if self.nnodes > 1:
                    # demo only: every node of the engine reads the file its node-rank-0 actor
                    # creates (the job arms an engine through that actor); the demo's nodes
                    # share one machine, and the run's marker keeps runs apart
                    run = os.environ.get("SLIME_HANGDOCTOR_DEMO", "run")
                    self.fault_arm_file = os.path.join(
                        tempfile.gettempdir(), f"demo-fault-{run}-engine{self.engine_index}.arm"
                    )
                argv += ["--fault-arm-file", self.fault_arm_file]
            armed_by = f" (arm file {self.fault_arm_file})" if self.fault_arm_file else ""
            logger.info(
                f"demo fault plan for engine {self.engine_index}: server fault {fault}{armed_by}"
            )
        return argv

    def _init_normal(self, server_args: list[str]) -> None:
        logger.info(f"Launch HttpServerEngineAdapter at: {self.server_host}:{self.server_port}")
        started = time.time()
        self.process = launch_server_process(
            server_args, self._base_url(), self.args.sglang_api_key, self.node_rank
        )
        if "--fault-after-s" in server_args:
            # The server counts from its own start, which lies between `started` and now.
            self.server_fault_at = time.time() + float(
                server_args[server_args.index("--fault-after-s") + 1]
            )
            logger.info(f"engine {self.rank} up in {time.time() - started:.1f}s")
        self._register_to_router()

    def _register_to_router(self) -> None:
        """slime's `_register_to_router` for sglang-router >= 0.3 (slime main 624b824,
        sglang_engine.py:177-199; January layout 6485964, lines 185-204): POST /workers with
        the worker's URL and type, no timeout. The router answers 202 and adds the worker in the
        background (it probes the worker's /server_info and /model_info first)."""
        import requests

        if self.node_rank == 0 and self.router_ip and self.router_port:
            worker_url = f"http://{self.server_host}:{self.server_port}"
            payload = {
                "url": worker_url,
                "worker_type": self.worker_type,
            }
            response = requests.post(
                f"http://{self.router_ip}:{self.router_port}/workers",
                json=payload,
                headers=self._headers(),  # demo: the router shares the engines' API key, if any
            )
            response.raise_for_status()

    def remove_from_router(self) -> bool:
        """slime's SGLangEngine.shutdown takes its worker out of the router this way (slime main
        624b824, sglang_engine.py:301-317): find the worker's id in GET /workers, then
        DELETE /workers/{id}. True when the router had the worker."""
        import requests

        base = f"http://{self.router_ip}:{self.router_port}"
        worker_url = self._base_url()
        response = None
        try:
            answer = requests.get(f"{base}/workers", headers=self._headers())
            for worker in answer.json()["workers"]:
                if worker["url"] == worker_url:
                    response = requests.delete(
                        f"{base}/workers/{worker['id']}", headers=self._headers()
                    )
                    break
            else:
                logger.warning(f"Worker {worker_url} not found in router during shutdown.")
        except Exception as e:
            logger.warning(f"Failed to fetch workers list or remove worker: {e}")
        if response is not None:
            response.raise_for_status()
        return response is not None

    def _base_url(self) -> str:
        return f"http://{self.server_host}:{self.server_port}"

    def _headers(self) -> dict[str, str]:
        key = self.args.sglang_api_key
        return {"Authorization": f"Bearer {key}"} if key else {}

    def _make_request(self, endpoint: str, payload: dict[str, Any] | None = None) -> Any:
        """POST to the server and return its JSON; no timeout."""
        import requests

        if self.node_rank != 0:
            return None
        url = f"{self._base_url()}/{endpoint}"
        response = requests.post(url, json=payload or {}, headers=self._headers())
        try:
            response.raise_for_status()
        except requests.exceptions.HTTPError as e:
            raise requests.exceptions.HTTPError(f"{e} ({response.text=})", response=response) from e
        return response.json()

    # miles main's weight-update session and version (radixark/miles 31f1ca961
    # miles/backends/sglang_utils/sglang_engine.py:636-648): each a `_make_request` POST with no
    # timeout. slime's own job never calls them; the job laid out as miles does, around every
    # weight update (update_weight/common.py, update_weight_from_distributed.py).
    def begin_weight_update(self, selector: str = "all") -> Any:
        """POST /begin_weight_update: the engine readies its weights to be replaced."""
        return self._make_request("begin_weight_update", {"selector": selector})

    def end_weight_update(self) -> Any:
        """POST /end_weight_update: the engine finishes the weights it was sent."""
        return self._make_request("end_weight_update", {})

    def update_weight_version(self, weight_version: str) -> Any:
        return self._make_request(
            "update_weight_version", {"new_version": weight_version, "abort_all_requests": False}
        )

    def health_generate(self, timeout: float = 5.0) -> bool:
        import requests

        response = requests.get(f"{self._base_url()}/health_generate", timeout=timeout)
        response.raise_for_status()
        return True

    def get_url(self) -> str:
        return self._base_url()

    def arm_server_fault(self) -> bool:
        """Demo only: make this engine's server fault live now (creates its arm file)."""
        if self.fault_arm_file is None:
            return False
        with open(self.fault_arm_file, "w") as fh:
            fh.write("armed\n")
        return True

    def get_server_fault_at(self) -> float | None:
        """Demo only: when this engine's timed server fault goes live (None: no timed fault)."""
        return self.server_fault_at

    def flush_cache(self) -> None:
        """GET /flush_cache until 200 (it is not 200 while requests are pending): 60 tries."""
        import requests

        for _ in range(60):
            try:
                response = requests.get(f"{self._base_url()}/flush_cache", headers=self._headers())
                if response.status_code == 200:
                    return
            except requests.ConnectionError:
                raise
            except Exception as e:
                logger.info(f"Error flushing cache: {e}")
            time.sleep(1)
        raise TimeoutError("Timeout while flushing cache.")

    def get_weight_version(self) -> str | None:
        import requests

        response = requests.get(f"{self._base_url()}/get_weight_version", headers=self._headers())
        response.raise_for_status()
        version = response.json().get("weight_version")
        return None if version is None else str(version)

    def release_memory_occupation(self) -> Any:
        if self.args.offload_pause_generation:
            # THUDM/slime PR#2015 (open): pause generation (and flush) before the release, so
            # that no request runs against memory being released; continued after onload_kv
            self.pause_generation()
        self.flush_cache()
        return self._make_request("release_memory_occupation")

    def resume_memory_occupation(self, tags: list[str] | None = None) -> Any:
        result = self._make_request("resume_memory_occupation", {"tags": tags})
        if self.args.offload_pause_generation and (tags is None or "kv_cache" in tags):
            self.continue_generation()  # PR#2015: generation continues once the KV cache is back
        return result

    def init_weights_update_group(
        self,
        master_address: str,
        master_port: int,
        rank_offset: int,
        world_size: int,
        group_name: str,
        backend: str,
    ) -> Any:
        return self._make_request(
            "init_weights_update_group",
            {
                "master_address": master_address,
                "master_port": master_port,
                "rank_offset": rank_offset,
                "world_size": world_size,
                "group_name": group_name,
                "backend": backend,
            },
        )

    def destroy_weights_update_group(self, group_name: str) -> Any:
        return self._make_request("destroy_weights_update_group", {"group_name": group_name})

    def update_weights_from_distributed(
        self,
        names: list[str],
        dtypes: list[str],
        shapes: list[list[int]],
        group_name: str,
        flush_cache: bool = False,
        weight_version: str | None = None,
    ) -> Any:
        payload: dict[str, Any] = {
            "names": names,
            "dtypes": dtypes,
            "shapes": shapes,
            "group_name": group_name,
            "flush_cache": flush_cache,
        }
        if weight_version is not None:
            payload["weight_version"] = weight_version
        return self._make_request("update_weights_from_distributed", payload)

    def update_weights_from_tensor(
        self,
        serialized_named_tensors: list[str],
        load_format: str | None = None,
        flush_cache: bool = False,
        weight_version: str | None = None,
    ) -> Any:
        payload: dict[str, Any] = {
            "serialized_named_tensors": serialized_named_tensors,
            "load_format": load_format,
            "flush_cache": flush_cache,
        }
        if weight_version is not None:
            payload["weight_version"] = weight_version
        return self._make_request("update_weights_from_tensor", payload)

    def update_weights_from_disk(
        self,
        model_path: str,
        load_format: str | None = None,
        weight_version: str | None = None,
    ) -> Any:
        """Reload weights from the checkpoint at *model_path* without restarting the engine
        (slime main 624b824, sglang_engine.py:358-370): POST /update_weights_from_disk, no
        timeout."""
        payload: dict[str, Any] = {"model_path": model_path}
        if load_format is not None:
            payload["load_format"] = load_format
        if weight_version is not None:
            payload["weight_version"] = weight_version
        return self._make_request("update_weights_from_disk", payload)

    def pause_generation(self) -> Any:
        return self._make_request("pause_generation", {})

    def continue_generation(self) -> Any:
        return self._make_request("continue_generation", {})

    def shutdown(self) -> None:
        logger.info(f"Shutdown engine {self.server_host}:{self.server_port}...")
        if self.node_rank == 0 and self.router_ip and self.router_port:
            self.remove_from_router()
        if self.process is not None and self.process.is_alive():
            self.process.terminate()
            self.process.join(timeout=5)
            if self.process.is_alive():
                self.process.kill()
