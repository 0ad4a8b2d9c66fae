"""Outputs of rollout functions and `call_rollout_fn`, as in slime/rollout/base_types.py."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from slime.utils.types import Sample


@dataclass
class RolloutFnTrainOutput:
    samples: list[list[Sample]]
    metrics: dict[str, Any] = field(default_factory=dict)


@dataclass
class RolloutFnEvalOutput:
    data: dict[str, dict[str, list[Any]]]
    metrics: dict[str, Any] = field(default_factory=dict)


def call_rollout_fn(fn: Callable[..., Any], *args: Any, evaluation: bool, **kwargs: Any) -> Any:
    output = fn(*args, **kwargs, evaluation=evaluation)
    if evaluation and not isinstance(output, RolloutFnEvalOutput):
        output = RolloutFnEvalOutput(data=output)
    if not evaluation and not isinstance(output, RolloutFnTrainOutput):
        output = RolloutFnTrainOutput(samples=output)
    return output
