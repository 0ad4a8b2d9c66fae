"""Start-up of the job: placement group, rollout manager (with the engines), training models."""

from __future__ import annotations

import argparse
import logging
from typing import Any

import ray
from ray.util.placement_group import placement_group

from slime.observability.logging_utils import log_fault_armed
from slime.ray.actor_group import RayTrainGroup
from slime.ray.rollout import RolloutManager
from slime.utils.misc import (
    master_node_proxy_env,
    start_black_hole_proxy,
    start_reward_service,
    start_slow_storage,
)

logger = logging.getLogger(__name__)

PGTuple = tuple[Any, list[int], list[int]]


def _create_placement_group(
    num_gpus: int, node_resources: list[str | None] | None = None, fault: str = "none"
) -> PGTuple:
    """One bundle per "GPU". The demo has no GPUs: a bundle holds a sliver of CPU (plus, for
    multi-node demos, a sliver of a custom resource that pins the bundle to a node)."""
    logger.info(f"Creating placement group with {num_gpus} GPUs...")
    pins = node_resources or [None] * num_gpus
    bundles: list[dict[str, float]] = [
        {"CPU": 0.01, **({pin: 0.01} if pin else {})} for pin in pins
    ]
    if fault == "placement_infeasible":
        # Demo fault (OpenRLHF#865, a first run on a too small cluster): the job asks for one
        # real GPU per bundle, as slime does ({"GPU": 1, "CPU": 1}); the cluster has fewer.
        bundles = [{**b, "GPU": 1.0} for b in bundles]
        log_fault_armed(logger, fault, "create_placement_groups (pg.ready)", 0)
    pg = placement_group(bundles, strategy="PACK")
    ray.get(pg.ready())
    indices = list(range(num_gpus))
    for i in indices:
        logger.info(f"  bundle {i}, actual_bundle_index: {i}, node: 127.0.0.1, gpu: {i}")
    return pg, indices, indices


def create_placement_groups(args: argparse.Namespace) -> dict[str, PGTuple]:
    actor_gpus = args.actor_num_nodes * args.actor_num_gpus_per_node
    if args.colocate:
        pg, idx, gpus = _create_placement_group(actor_gpus, fault=args.fault)
        return {"actor": (pg, idx, gpus), "rollout": (pg, idx, gpus)}
    pins = [args.actor_node_resource] * actor_gpus + rollout_pins(args)
    pg, idx, gpus = _create_placement_group(actor_gpus + args.rollout_num_gpus, pins, args.fault)
    return {
        "actor": (pg, idx[:actor_gpus], gpus[:actor_gpus]),
        "rollout": (pg, idx[actor_gpus:], gpus[actor_gpus:]),
    }


def rollout_pins(args: argparse.Namespace) -> list[str | None]:
    """The node resource of each rollout "GPU": `--rollout-node-resource`, or with several
    (comma-separated) the GPUs of node k, `--num-gpus-per-node` at a time, on the k-th (cyclically):
    as slime's placement group orders its bundles by node (624b824 placement_group.py:21-88 sorts
    them by node IP and GPU id), an engine wider than a node gets one actor on each of consecutive nodes."""
    names = [n for n in (args.rollout_node_resource or "").split(",") if n] or [None]
    per_node = max(int(args.num_gpus_per_node), 1)
    return [names[(i // per_node) % len(names)] for i in range(args.rollout_num_gpus)]


def allocate_train_group(
    args: argparse.Namespace, num_nodes: int, num_gpus_per_node: int, pg: PGTuple
) -> RayTrainGroup:
    return RayTrainGroup(
        args=args,
        num_nodes=num_nodes,
        num_gpus_per_node=num_gpus_per_node,
        pg=pg,
        num_gpus_per_actor=0.4,
    )


def create_training_models(
    args: argparse.Namespace, pgs: dict[str, PGTuple], rollout_manager: Any
) -> tuple[RayTrainGroup, None]:
    actor_model = allocate_train_group(
        args=args,
        num_nodes=args.actor_num_nodes,
        num_gpus_per_node=args.actor_num_gpus_per_node,
        pg=pgs["actor"],
    )
    start_rollout_ids = ray.get(actor_model.async_init(args, role="actor", with_ref=False))
    assert len(set(start_rollout_ids)) == 1
    if args.start_rollout_id is None:
        args.start_rollout_id = start_rollout_ids[0]
    actor_model.set_rollout_manager(rollout_manager)
    return actor_model, None


def create_rollout_manager(args: argparse.Namespace, pg: PGTuple) -> tuple[Any, int | None]:
    manager_cls: Any = RolloutManager
    options: dict[str, Any] = {"num_cpus": 0, "num_gpus": 0}
    if args.fault == "rollout_behind_proxy":
        # Demo fault (slime#1026): the RolloutManager, the process that sends /generate, runs with
        # the master node's proxy variables; the proxy accepts and never answers. (The engines
        # and trainers keep a clean environment, as on nodes whose shells have no proxy.)
        proxy = start_black_hole_proxy()
        options["runtime_env"] = {"env_vars": master_node_proxy_env(proxy)}
        logger.info(f"demo fault plan: the rollout manager runs with http_proxy={proxy}")
    if args.fault == "reward_service_stuck":
        # Demo fault: the remote reward model (`--rm-url`) runs outside the job.
        start_reward_service(args)
        logger.info(f"demo fault plan: the rollout's rewards come from {args.rm_url}")
    if args.fault == "weight_load_slow_storage":
        # Demo fault: engine 1's host reads the disk sync's checkpoints from slow shared storage.
        start_slow_storage(args)
        logger.info("demo fault plan: engine 1's host mounts the weight sync dir on slow storage")
    deployment = None
    if args.serving_cluster:
        # slime's next layout: the routers and engines belong to a detached ServingCluster
        from slime.ray.serving import start_serving_cluster

        deployment = start_serving_cluster(args, pg)
    rollout_manager = manager_cls.options(**options).remote(args, pg, deployment)
    # slime asks for the epoch size here; the call also waits for the engines to be up.
    num_rollout_per_epoch = ray.get(rollout_manager.get_num_rollout_per_epoch.remote())
    if args.offload_rollout:
        ray.get(rollout_manager.offload.remote())
    return rollout_manager, num_rollout_per_epoch
