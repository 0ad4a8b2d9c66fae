"""`TrainRayActor`: the base of MegatronTrainRayActor (rendezvous address, WORLD group)."""

from __future__ import annotations

import argparse
import logging
import os
from datetime import timedelta
from typing import Any

from slime.observability.logging_utils import configure_logger
from slime.ray.ray_actor import RayActor
from slime.utils.distributed_utils import init_gloo_group
from slime.utils.misc import get_current_node_ip

logger = logging.getLogger(__name__)


class TrainRayActor(RayActor):
    def __init__(
        self, world_size: int, rank: int, master_addr: str | None, master_port: int | None
    ) -> None:
        configure_logger()
        self._world_size = world_size
        self._rank = rank
        self._store: Any = None
        if master_addr and master_port:
            self.master_addr, self.master_port = master_addr, master_port
        else:
            # slime probes a free port here (`get_free_port`, train_actor.py) and binds it only in
            # init(), seconds later; on a shared CI box another process took it in between
            # (EADDRINUSE). The demo binds rank 0's store now, on a port the kernel picks, and
            # keeps it: same frames (init_process_group in init), no window for a race.
            import torch.distributed as dist

            self.master_addr = get_current_node_ip()
            self._store = dist.TCPStore(  # type: ignore[attr-defined]
                self.master_addr,
                0,
                is_master=True,
                wait_for_workers=False,
                timeout=timedelta(minutes=30),
            )
            self.master_port = int(self._store.port)
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
        timeout = timedelta(minutes=args.distributed_timeout_minutes)
        store = self._store
        if store is None:  # rank 0 listens since its constructor: this connects at once
            store = dist.TCPStore(self.master_addr, self.master_port, timeout=timeout)  # type: ignore[attr-defined]
        store.set_timeout(timeout)
        dist.init_process_group(
            backend="gloo",
            store=store,
            world_size=self._world_size,
            rank=self._rank,
            timeout=timeout,
        )
        init_gloo_group()
        args.rank = dist.get_rank()
        args.world_size = dist.get_world_size()
        logger.info(f"[Rank {args.rank}] joined the train process group (world {args.world_size})")
        return None
