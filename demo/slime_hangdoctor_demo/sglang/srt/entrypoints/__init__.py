"""sglang.srt.entrypoints stand-in."""
