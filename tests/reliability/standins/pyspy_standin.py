"""Stand-in `py-spy` (run through standins/pyspy/py-spy): misbehaves as HD_PYSPY_MODE says.

Each run leaves an empty file named by its pid in HD_PYSPY_PIDDIR (when set), so the test can
end a stand-in that outlived the CLI. Only the pid in HD_STANDIN_TARGET is touched; any other pid gets a plain error exit, so a stand-in
never stops or kills a process that is not the test's own.

Modes:
  hang     never exits (ignores SIGTERM), as a py-spy wedged on a target would.
  sigstop  SIGSTOPs the target, then hangs: a dump that would leave the target stopped if killed.
  ptrace   PTRACE_SEIZE + PTRACE_INTERRUPT on every thread of the target (it shows state `t`,
           exactly as under a real py-spy dump), then hangs.
  vanish   SIGKILLs the target and waits for it to be gone, then runs the real py-spy
           (HD_REAL_PYSPY) on the pid: a process that vanished between discovery and probing.
  midway   prints half a JSON dump, SIGKILLs the target, prints the error py-spy gives when its
           target disappears, exits 1: the target exiting mid-dump.
  log      appends its argv as one JSON line to HD_PYSPY_LOG, then runs the real py-spy.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import time

PTRACE_SEIZE = 0x4206
PTRACE_INTERRUPT = 0x4207


def _pid(argv: list[str]) -> int | None:
    for flag in ("--pid", "-p"):
        if flag in argv:
            return int(argv[argv.index(flag) + 1])
    return None


def _hang() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        time.sleep(3600)


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except OSError:
        return True
    return raw[raw.rfind(b")") + 2 : raw.rfind(b")") + 3] in (b"Z", b"X")


def _real(argv: list[str]) -> None:
    real = os.environ["HD_REAL_PYSPY"]
    os.execv(real, [real, *argv])


def _ptrace_stop(pid: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    for tid in sorted(int(t) for t in os.listdir(f"/proc/{pid}/task")):
        if libc.ptrace(PTRACE_SEIZE, tid, None, None) != 0:
            err = ctypes.get_errno()
            sys.stderr.write(f"Error: ptrace seize {tid}: {os.strerror(err)}\n")
            sys.exit(1)
        libc.ptrace(PTRACE_INTERRUPT, tid, None, None)


def main(argv: list[str]) -> None:
    piddir = os.environ.get("HD_PYSPY_PIDDIR")
    if piddir:  # so a test can end a stand-in that outlived the CLI
        with open(os.path.join(piddir, str(os.getpid())), "w", encoding="utf-8"):
            pass
    mode = os.environ.get("HD_PYSPY_MODE", "log")
    pid = _pid(argv)
    if mode == "log":
        with open(os.environ["HD_PYSPY_LOG"], "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"argv": argv, "pid": pid}) + "\n")
        _real(argv)
    target = int(os.environ.get("HD_STANDIN_TARGET", "0"))
    if pid is None or pid != target:
        sys.stderr.write(f"Error: stand-in py-spy: pid {pid} is not the test's target\n")
        sys.exit(1)
    if mode == "hang":
        _hang()
    elif mode == "sigstop":
        os.kill(pid, signal.SIGSTOP)
        _hang()
    elif mode == "ptrace":
        _ptrace_stop(pid)
        _hang()
    elif mode == "vanish":
        os.kill(pid, signal.SIGKILL)
        end = time.monotonic() + 5
        while not _gone(pid) and time.monotonic() < end:
            time.sleep(0.01)
        _real(argv)
    elif mode == "midway":
        sys.stdout.write(json.dumps([{"pid": pid, "thread_id": 1, "frames": []}])[:30])
        sys.stdout.flush()
        os.kill(pid, signal.SIGKILL)
        sys.stderr.write(
            "Error: Failed to copy PyThreadState\n\nCaused by:\n    No such process (os error 3)\n"
        )
        sys.exit(1)
    else:
        sys.stderr.write(f"Error: stand-in py-spy: unknown HD_PYSPY_MODE {mode!r}\n")
        sys.exit(2)


if __name__ == "__main__":
    main(sys.argv[1:])
