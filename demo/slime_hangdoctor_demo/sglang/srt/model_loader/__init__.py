"""The stand-in's model loader (as `sglang/srt/model_loader/`)."""
