"""Save strategies, named as megatron/core/dist_checkpointing/strategies/."""
