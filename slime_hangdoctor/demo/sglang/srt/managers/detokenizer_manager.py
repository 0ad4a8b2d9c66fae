"""The `sglang::detokenizer` child: present in the process tree, idle (the stand-in's outputs go
straight from the scheduler to the HTTP process)."""

from __future__ import annotations

import os
import time


def run_detokenizer_process(parent_pid: int) -> None:
    """The `sglang::detokenizer` child: present in the process tree, idle (outputs go direct)."""
    while True:
        time.sleep(1.0)
        if os.getppid() != parent_pid:
            os._exit(0)
