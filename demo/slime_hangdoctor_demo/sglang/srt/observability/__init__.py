"""sglang.srt.observability stand-in."""
