"""The demo job's asynchronous driver, in the order of slime's train_async.py (slime main 624b824,
train_async.py:9-80): the next rollout is generated while the current one trains, and the pending
generate is synced before each weight update ("to prevent update weight in the middle of
generation"). Demo fault `update_waits_behind_rollout_gate` is a fork of that loop without the sync.
"""

from __future__ import annotations

import argparse

import ray
from slime.observability.logging_utils import configure_logger
from slime.ray.placement_group import (
    create_placement_groups,
    create_rollout_manager,
    create_training_models,
)
from slime.utils.arguments import parse_args
from slime.utils.misc import fault_armed, should_run_periodic_action


def train(args: argparse.Namespace) -> None:
    assert not args.colocate, "Colocation is not supported for async training."
    configure_logger()
    # allocate the GPUs
    pgs = create_placement_groups(args)

    # create the rollout manager, with sglang engines inside.
    rollout_manager, _num_rollout_per_epoch = create_rollout_manager(args, pgs["rollout"])

    # create the actor model
    actor_model, _critic_model = create_training_models(args, pgs, rollout_manager)

    # Always push actor weights to rollout once weights are loaded.
    actor_model.update_weights()

    # async train loop.
    rollout_data_next_future = rollout_manager.generate.remote(args.start_rollout_id)
    for rollout_id in range(args.start_rollout_id, args.num_rollout):
        # Sync the last generation
        if rollout_data_next_future is not None:
            rollout_data_curr_ref = ray.get(rollout_data_next_future)

        # Start the next rollout early.
        if rollout_id + 1 < args.num_rollout:
            rollout_data_next_future = rollout_manager.generate.remote(rollout_id + 1)

        ray.get(actor_model.async_train(rollout_id, rollout_data_curr_ref))

        if should_run_periodic_action(rollout_id, args.save_interval):
            actor_model.save_model(rollout_id)

        if (rollout_id + 1) % args.update_weights_interval == 0:
            # sync generate before update weights to prevent update weight in the middle of
            # generation (the demo fault's fork leaves this sync out)
            if not fault_armed(args, "update_waits_behind_rollout_gate", rollout_id):
                x = rollout_data_next_future
                rollout_data_curr_ref = ray.get(x) if x is not None else None
                rollout_data_next_future = None
            actor_model.update_weights()

    ray.get(rollout_manager.dispose.remote())


if __name__ == "__main__":
    train(parse_args())
