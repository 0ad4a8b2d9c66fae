"""A stand-in for the few Megatron-LM entry points the demo job calls (named as Megatron's own)."""
