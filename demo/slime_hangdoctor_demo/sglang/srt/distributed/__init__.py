"""The stand-in's tensor-parallel groups (as `sglang/srt/distributed/`)."""
