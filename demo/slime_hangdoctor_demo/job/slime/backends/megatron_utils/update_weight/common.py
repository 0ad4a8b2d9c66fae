"""The trainer's side of miles main's weight-update session: each engine opens a session before
the weights are sent and closes it after (radixark/miles 31f1ca961
miles/backends/megatron_utils/update_weight/common.py:411-429, called from
update_weight_from_distributed/mixin.py:318,330 and update_weight_from_tensor.py:260,319). slime
keeps a common.py here too, without these functions: only the job laid out as miles calls them."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any


def begin_weight_update(rollout_engines: Sequence[Any], selector: str = "all") -> None:
    import ray

    ray.get([engine.begin_weight_update.remote(selector=selector) for engine in rollout_engines])


def weight_update_selector(args: argparse.Namespace) -> str:
    """ "target" only when a draft model is served that the trainer has no weights for (miles's
    rule, common.py:416-424); the demo serves none: "all"."""
    if getattr(args, "sglang_speculative_algorithm", None) and not getattr(
        args, "mtp_num_layers", None
    ):
        return "target"
    return "all"


def end_weight_update(rollout_engines: Sequence[Any]) -> None:
    import ray

    ray.get([engine.end_weight_update.remote() for engine in rollout_engines])
