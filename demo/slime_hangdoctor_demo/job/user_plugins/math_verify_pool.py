"""A user's reward, plugged in with `--custom-rm-path
user_plugins.math_verify_pool.math_verify_reward` (slime's hook: `await rm_function(args, sample)`,
slime/rollout/rm_hub/__init__.py `async_rm`).

It grades each answer off the rollout's event loop, in a pool of workers, as the reward wrappers of
verl and AReaL do: AReaL's AsyncRewardWrapper runs the math verifier in a ProcessPoolExecutor of a
few workers (areal-project/AReaL PR#1426), verl's reward loop in a thread or process pool
(verl#5839). The grader is slime's own (rm_hub/math_utils.py `grade_answer_verl`, which falls back
to sympy), with no timeout: math_verify's own timeouts are signal based and only work on a main
thread, so off it they are turned off (verl PR#5635: `parsing_timeout=None, timeout_seconds=None`).
One pathological answer keeps its worker in the grader for ever, and the rollout awaits its reward.

`--reward-pool process` (the default): a ProcessPoolExecutor (fork on Linux: each worker is a child
of the RolloutManager that keeps its Ray title); `--reward-pool thread`: a ThreadPoolExecutor (a
thread `reward-verifier_N` of the RolloutManager).
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
from typing import Any

from slime.rollout.rm_hub.math_utils import grade_answer_verl

# AReaL sizes its pool max((cpu_count // device_count) // 2, 1): one worker on an 8-GPU node with
# 16 cores; every grade then waits behind the one a stuck answer holds
MAX_WORKERS = 1
_POOL: concurrent.futures.Executor | None = None


def _pool(kind: str) -> concurrent.futures.Executor:
    global _POOL
    if _POOL is None:
        if kind == "thread":
            _POOL = concurrent.futures.ThreadPoolExecutor(
                max_workers=MAX_WORKERS, thread_name_prefix="reward-verifier"
            )
        else:
            _POOL = concurrent.futures.ProcessPoolExecutor(max_workers=MAX_WORKERS)
    return _POOL


def verify(response: str, label: str) -> float:
    """Runs in a pool worker: slime's math grade of one answer."""
    return 1.0 if grade_answer_verl(response, label) else 0.0


async def math_verify_reward(args: argparse.Namespace, sample: Any, **kwargs: Any) -> float:
    loop = asyncio.get_running_loop()
    pool = _pool(args.reward_pool)
    return await loop.run_in_executor(pool, verify, sample.response, sample.label or "")
