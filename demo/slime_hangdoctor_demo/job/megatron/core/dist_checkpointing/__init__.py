"""`megatron.core.dist_checkpointing`: the torch_dist checkpoint save the demo's `--async-save` takes."""
