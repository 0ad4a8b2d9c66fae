"""The loss dispatch, as slime/backends/training_utils/loss.py: slime's own loss, or the user's
function named by --custom-loss-function-path."""

from __future__ import annotations

import argparse
from typing import Any

from slime.utils.misc import load_function


def loss_function(args: argparse.Namespace, batch: dict[str, Any], logits: Any) -> Any:
    if args.custom_loss_function_path:
        return load_function(args.custom_loss_function_path)(args, batch, logits)
    mask = batch["loss_masks"]
    return (logits * mask).sum() / max(1, int(mask.sum()))
