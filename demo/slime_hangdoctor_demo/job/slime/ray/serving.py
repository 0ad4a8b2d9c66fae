"""slime's next layout: a named, detached `ServingCluster` actor starts and owns the routers and the
engines, not the RolloutManager (THUDM/slime's open work, slime/ray/serving.py at 15b8e507: the
class :23-51, its constructor calling `start_rollout_servers` :38-40 and keeping the router
processes it forked :37-43; `deployment` :61-67 hands the servers and the routers' addresses to
whoever uses them). The demo's differs where the demo needs less: the placement group comes from
the driver (slime's creates its own, :36), and the weight-update lock and the health monitors stay
with the RolloutManager. The job runs it with `--serving-cluster` (demo/launch.py's layout
`slime-next`)."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import multiprocessing
from typing import Any

import ray

from slime.observability.logging_utils import configure_logger

logger = logging.getLogger(__name__)

SERVING_CLUSTER_NAME = "slime_serving_cluster"  # the demo's name for it


@dataclasses.dataclass
class ServingDeployment:
    servers: dict[str, Any]
    routers: dict[str, Any]


@ray.remote
class ServingCluster:
    def __init__(self, args: argparse.Namespace, pg: Any) -> None:
        from slime.ray.rollout import start_rollout_servers

        configure_logger()
        self.args = args
        existing_children = {p.pid for p in multiprocessing.active_children()}
        self.servers, handles = start_rollout_servers(args, pg)
        self.router_processes = [
            p for p in multiprocessing.active_children() if p.pid not in existing_children
        ]
        ray.get(handles)
        logger.info(
            f"serving cluster up: {len(self.router_processes)} router(s), "
            f"engines of {', '.join(self.servers)}"
        )

    def deployment(self) -> ServingDeployment:
        routers = {
            name: getattr(self.args, name)
            for name in ("sglang_router_ip", "sglang_router_port", "sglang_model_routers")
            if hasattr(self.args, name)
        }
        return ServingDeployment(servers=self.servers, routers=routers)


def start_serving_cluster(args: argparse.Namespace, pg: Any) -> ServingDeployment:
    """Create the detached ServingCluster (its constructor starts the routers and the engines) and
    take its deployment."""
    cluster_cls: Any = ServingCluster
    serving = cluster_cls.options(
        name=SERVING_CLUSTER_NAME, lifetime="detached", num_cpus=0, num_gpus=0
    ).remote(args, pg)
    deployment: ServingDeployment = ray.get(serving.deployment.remote())
    return deployment
