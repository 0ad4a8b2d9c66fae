"""The training step, named as slime/backends/megatron_utils/model.py (a tiny CPU "model")."""

from __future__ import annotations

import argparse
import logging
import time
from typing import Any

from megatron.training.checkpointing import save_checkpoint

logger = logging.getLogger(__name__)

# name -> shape of the demo policy's parameters (HF names, as the weight sync sends them)
PARAM_SHAPES: dict[str, tuple[int, ...]] = {
    "model.embed_tokens.weight": (256, 32),
    "model.layers.0.self_attn.qkv_proj.weight": (96, 32),
    "model.layers.0.mlp.gate_up_proj.weight": (128, 32),
    "model.norm.weight": (32,),
    "lm_head.weight": (256, 32),
}
VOCAB_PARAMS = ("model.embed_tokens.weight", "lm_head.weight")  # rows: --vocab-size


def initialize_model_and_optimizer(args: argparse.Namespace) -> tuple[dict[str, Any], Any]:
    import torch

    gen = torch.Generator().manual_seed(1234)
    vocab = int(getattr(args, "vocab_size", 256))
    shapes = {n: (vocab, *s[1:]) if n in VOCAB_PARAMS else s for n, s in PARAM_SHAPES.items()}
    model = {name: torch.randn(shape, generator=gen) * 0.02 for name, shape in shapes.items()}
    return model, {"lr": 1e-3, "step": 0}


def forward_backward_no_pipelining(
    model: dict[str, Any], data_iterator: list[dict[str, Any]]
) -> dict[str, Any]:
    """A stand-in forward/backward: gradients from the batch's rewards, on the CPU."""
    import torch

    rewards = torch.tensor([r for mb in data_iterator for r in mb["rewards"]] or [0.0])
    scale = float(rewards.mean()) + 1e-3
    return {name: torch.full_like(p, scale) * 0.01 for name, p in model.items()}


def train_one_step(
    args: argparse.Namespace,
    rollout_id: int,
    step_id: int,
    data_iterator: list[dict[str, Any]],
    model: dict[str, Any],
    optimizer: dict[str, Any],
) -> dict[str, float]:
    import torch
    import torch.distributed as dist

    grads = forward_backward_no_pipelining(model, data_iterator)
    time.sleep(args.train_step_seconds)  # the GPU work of a real step
    # data-parallel gradient all-reduce (the collective every rank must reach)
    flat = torch.cat([g.flatten() for g in grads.values()])
    dist.all_reduce(flat)
    flat /= dist.get_world_size()
    offset = 0
    for p in model.values():
        n = p.numel()
        p.sub_(optimizer["lr"] * flat[offset : offset + n].view_as(p))
        offset += n
    optimizer["step"] += 1
    loss = torch.tensor([float(flat.abs().mean())])
    dist.all_reduce(loss)
    return {"loss": float(loss) / dist.get_world_size(), "grad_norm": float(flat.norm())}


def train(
    rollout_id: int,
    model: dict[str, Any],
    optimizer: dict[str, Any],
    data_iterator: list[dict[str, Any]],
    num_microbatches: list[int],
    args: argparse.Namespace,
) -> None:
    """One `train_one_step` per entry of `num_microbatches` (slime main 624b824,
    megatron_utils/model.py:816-840: `num_steps_per_rollout = len(num_microbatches)`)."""
    for step_id in range(len(num_microbatches)):
        metrics = train_one_step(args, rollout_id, step_id, data_iterator, model, optimizer)
        if args.rank == 0:
            logger.info(
                f"step {optimizer['step']}: {{'train/loss': {metrics['loss']:.6f}, 'train/grad_norm': {metrics['grad_norm']:.4f}}}"
            )


def save(iteration: int, model: dict[str, Any], optimizer: Any, opt_param_scheduler: Any) -> None:
    """slime's `save`: Megatron's save_checkpoint of the (one-chunk) model."""
    save_checkpoint(
        iteration, [model], optimizer, opt_param_scheduler, num_floating_point_operations_so_far=0
    )
