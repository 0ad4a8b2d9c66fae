"""`TrainRayActor`: the base of MegatronTrainRayActor (rendezvous address, WORLD group)."""

from __future__ import annotations

import argparse
import logging
import os
import random
from datetime import timedelta
from typing import Any

from slime.observability.logging_utils import configure_logger
from slime.ray.ray_actor import RayActor
from slime.utils.distributed_utils import init_gloo_group

logger = logging.getLogger(__name__)


class TrainRayActor(RayActor):
    def __init__(
        self, world_size: int, rank: int, master_addr: str | None, master_port: int | None
    ) -> None:
        configure_logger()
        self._world_size = world_size
        self._rank = rank
        if master_addr and master_port:
            self.master_addr, self.master_port = master_addr, master_port
        else:
            self.master_addr, self.master_port = self._get_current_node_ip_and_free_port(
                start_port=random.randint(20000, 21000)
            )
        os.environ["MASTER_ADDR"] = self.master_addr
        os.environ["MASTER_PORT"] = str(self.master_port)
        os.environ["WORLD_SIZE"] = str(world_size)
        os.environ["RANK"] = str(rank)
        os.environ["LOCAL_RANK"] = str(rank)

    def get_master_addr_and_port(self) -> tuple[str, int]:
        return self.master_addr, self.master_port

    def init(self, args: argparse.Namespace, role: str, with_ref: bool = False) -> Any:
        import torch.distributed as dist

        self.args = args
        self.role = role
        self.with_ref = with_ref
        dist.init_process_group(
            backend="gloo",
            init_method=f"tcp://{self.master_addr}:{self.master_port}",
            world_size=self._world_size,
            rank=self._rank,
            timeout=timedelta(minutes=args.distributed_timeout_minutes),
        )
        init_gloo_group()
        args.rank = dist.get_rank()
        args.world_size = dist.get_world_size()
        logger.info(f"[Rank {args.rank}] joined the train process group (world {args.world_size})")
        return None
