"""The kernel probe reads a process that py-spy holds (tracing stop) again once it is let go: a
reading in tracing stop says nothing (analysis/kernel.py `traced`), and two of them (CI saw it:
demo checkpoint_stuck_storage, rank 0 read in `ptrace_stop` at both samples) hid a stuck write."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import threading
import time

import pytest

from slime_hangdoctor.collect.kernel import scan_kernel

PTRACE_ATTACH, PTRACE_DETACH = 16, 17


def _hold(pid: int, seconds: float, held: threading.Event, errors: list[str]) -> None:
    """Attach with ptrace (as py-spy does), keep the target in tracing stop, then let it go."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    if libc.ptrace(PTRACE_ATTACH, pid, None, None) != 0:
        errors.append(os.strerror(ctypes.get_errno()))
        held.set()
        return
    os.waitpid(pid, 0)
    held.set()
    time.sleep(seconds)
    libc.ptrace(PTRACE_DETACH, pid, None, None)


def test_a_process_in_tracing_stop_is_read_again_once_released() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.3)
        held, errors = threading.Event(), []
        tracer = threading.Thread(target=_hold, args=(child.pid, 0.1, held, errors))
        tracer.start()
        held.wait(5)
        if errors:
            pytest.skip(f"ptrace not permitted here: {errors[0]}")
        with open(f"/proc/{child.pid}/stat") as fh:
            assert fh.read().rpartition(")")[2].split()[0] == "t"  # it is held now
        doc, _problems = scan_kernel([child.pid], None, time.monotonic() + 5)
        tracer.join()
        row = doc["processes"][str(child.pid)]
        assert row["stat"].rpartition(")")[2].split()[0] == "S", row
        assert (row["wchan"] or "").strip() != "ptrace_stop", row
    finally:
        child.kill()
        child.wait()
