"""sglang.srt.utils stand-in."""
