"""A user's custom loss, plugged in with `--custom-loss-function-path
user_plugins.token_mean_loss.token_mean_loss` (slime's custom-loss hook).

It averages the policy loss over the response tokens of the micro-batch, and "waits" for the
micro-batch to hold at least one response token before it divides. A micro-batch with none (a
data-parallel rank that received only prompts with empty responses, as the context-parallel ranks
without response tokens of slime#1487) makes it loop forever: that rank never reaches the step's
gradient all-reduce, and its peers wait there.
"""

from __future__ import annotations

import argparse
from typing import Any


def token_mean_loss(args: argparse.Namespace, batch: dict[str, Any], logits: Any) -> Any:
    mask = batch["loss_masks"]
    tokens = int(mask.sum())
    spins = 0
    while tokens == 0:  # "wait until the batch has tokens": it never will
        spins = (spins + 1) % 1000003
        tokens = int(mask.sum())
    return (logits * mask).sum() / tokens
