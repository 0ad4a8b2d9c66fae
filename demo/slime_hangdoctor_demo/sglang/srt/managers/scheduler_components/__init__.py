"""sglang.srt.managers.scheduler_components stand-in."""
