"""The few megatron.core parts the demo job calls (named as Megatron-Core's own)."""
