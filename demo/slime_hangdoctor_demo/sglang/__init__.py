"""Stand-in SGLang code, laid out like SGLang's own tree (`python/sglang/...`).

The SGLang stand-in (`slime_hangdoctor_demo.sglang_server`) keeps its scheduler, worker and model
runner in the files where SGLang 0.5.15 keeps them (`sglang/srt/managers/scheduler.py`, ...), so
py-spy frames of the demo carry the same file paths and function names as a real engine
(reference/sglang.md §5). It imports nothing of a real sglang package.
"""
