"""The stand-in's KV cache pieces (as `sglang/srt/mem_cache/`)."""
