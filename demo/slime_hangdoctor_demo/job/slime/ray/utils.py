"""`Lock`: the actor RolloutManager creates to serialise weight broadcasts to the engines."""

from __future__ import annotations

import ray

from slime.ray.ray_actor import RayActor


@ray.remote(num_cpus=0)
class Lock(RayActor):
    def __init__(self) -> None:
        self._locked = False

    def acquire(self) -> bool:
        """Take the lock if free; returns whether it was taken (callers spin on it)."""
        if self._locked:
            return False
        self._locked = True
        return True

    def release(self) -> None:
        assert self._locked, "Lock is not acquired, cannot release."
        self._locked = False
