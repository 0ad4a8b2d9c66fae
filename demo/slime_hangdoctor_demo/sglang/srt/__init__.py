"""sglang.srt stand-in."""
