"""Reward functions. Rule-based ones run synchronously on the rollout's event-loop thread; `remote_rm`
awaits a reward service over HTTP on it (slime/rollout/rm_hub/__init__.py, January 2026 layout
9bfe152: one aiohttp session per sample, aiohttp's default 300 s total timeout)."""

from __future__ import annotations

import argparse
import random

from slime.rollout.rm_hub.math_utils import extract_boxed_answer, grade_answer_verl
from slime.utils.misc import load_function
from slime.utils.types import Sample


async def remote_rm(args: argparse.Namespace, sample: Sample) -> float:
    """slime's `remote_rm` (9bfe152 rm_hub/__init__.py:17-27): POST the sample to `--rm-url`."""
    import aiohttp

    payload = {"prompt": sample.prompt, "response": sample.response, "label": sample.label}
    async with aiohttp.ClientSession() as session, session.post(args.rm_url, json=payload) as resp:
        resp.raise_for_status()
        return float(await resp.json())


async def async_rm(args: argparse.Namespace, sample: Sample) -> float:
    if args.custom_rm_path is not None:
        # slime's hook for the user's reward (rm_hub/__init__.py:45-47 at 9bfe152)
        rm_function = load_function(args.custom_rm_path)
        return float(await rm_function(args, sample))
    rm_type = (sample.metadata.get("rm_type") or args.rm_type or "").strip()
    response = sample.response
    label = sample.label or ""
    if rm_type.startswith("boxed_"):
        response = extract_boxed_answer(response) or ""
        rm_type = rm_type[len("boxed_") :]
    if rm_type == "remote_rm":
        return await remote_rm(args, sample)
    if rm_type == "math":
        return 1.0 if grade_answer_verl(response, label) else 0.0
    if rm_type == "random":
        return float(random.randint(0, 1))
    raise NotImplementedError(f"Rule-based RM for {rm_type} is not implemented.")
