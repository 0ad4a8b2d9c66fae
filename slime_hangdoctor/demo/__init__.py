"""The built-in demo: a small slime-shaped job (`job/slime/...`, submitted to Ray with its own
folder as working dir so its stacks carry slime's real file paths), an SGLang stand-in that speaks
SGLang's HTTP protocol (`sglang_server.py`, `sglang/...`), the injectable faults (`faults.py`) and
the launcher (`launch.py`). Standalone: it imports nothing of the rest of the package.
"""
