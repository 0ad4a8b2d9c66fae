"""sglang.srt.managers stand-in."""
