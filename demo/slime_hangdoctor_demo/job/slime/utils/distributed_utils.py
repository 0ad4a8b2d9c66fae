"""Process-group helpers named as in slime/utils/distributed_utils.py (gloo on CPU in the demo)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

_GLOO_GROUP: Any = None


def init_gloo_group() -> Any:
    """A gloo group over all train ranks, used for barriers and object collectives."""
    import torch.distributed as dist

    global _GLOO_GROUP
    if _GLOO_GROUP is None:
        _GLOO_GROUP = dist.new_group(backend="gloo")
    return _GLOO_GROUP


def get_gloo_group() -> Any:
    if _GLOO_GROUP is None:
        raise RuntimeError("gloo group is not initialized")
    return _GLOO_GROUP


def init_process_group(
    backend: str,
    init_method: str,
    timeout: timedelta,
    world_size: int,
    rank: int,
    group_name: str,
) -> Any:
    """Create a process group that is NOT the default one (the trainer already has a WORLD):
    rendezvous on `init_method` (rank 0 hosts the store), build the backend, and register the
    group so that `dist.broadcast(..., group=pg)` accepts it."""
    from torch.distributed import distributed_c10d as c10d

    store, rank, world_size = next(
        c10d.rendezvous(  # type: ignore[attr-defined]
            init_method, rank, world_size, timeout=timeout
        )
    )
    store.set_timeout(timeout)
    store = c10d.PrefixStore(group_name, store)
    pg, _ = c10d._new_process_group_helper(
        world_size,
        rank,
        [],
        c10d.Backend(backend),
        store,
        group_name=c10d.GroupName(group_name),
        timeout=timeout,
    )
    c10d._world.pg_group_ranks[pg] = {i: i for i in range(world_size)}
    return pg
