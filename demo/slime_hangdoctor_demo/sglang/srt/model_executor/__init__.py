"""sglang.srt.model_executor stand-in."""
