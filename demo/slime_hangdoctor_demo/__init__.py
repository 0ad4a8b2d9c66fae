"""The built-in demo: a small slime-shaped job (`job/slime/...`, submitted to Ray with its own
folder as working dir so its stacks carry slime's real file paths), an SGLang stand-in that speaks
SGLang's HTTP protocol (`sglang_server.py`, `sglang/...`), the injectable faults (`faults.py`) and
the launcher (`launch.py`).

A distribution of its own (slime-hangdoctor-demo, demo/pyproject.toml), apart from the doctor's
wheel; it imports nothing of the doctor (slime_hangdoctor), whose `demo` command runs it.
"""
