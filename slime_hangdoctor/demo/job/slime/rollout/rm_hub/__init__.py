"""Reward functions. Rule-based ones run synchronously on the rollout's event-loop thread."""

from __future__ import annotations

import argparse
import random

from slime.rollout.rm_hub.math_utils import extract_boxed_answer, grade_answer_verl
from slime.utils.types import Sample


async def async_rm(args: argparse.Namespace, sample: Sample) -> float:
    rm_type = (sample.metadata.get("rm_type") or args.rm_type or "").strip()
    response = sample.response
    label = sample.label or ""
    if rm_type.startswith("boxed_"):
        response = extract_boxed_answer(response) or ""
        rm_type = rm_type[len("boxed_") :]
    if rm_type == "math":
        return 1.0 if grade_answer_verl(response, label) else 0.0
    if rm_type == "random":
        return float(random.randint(0, 1))
    raise NotImplementedError(f"Rule-based RM for {rm_type} is not implemented.")
