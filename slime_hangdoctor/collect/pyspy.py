"""Stack dumps with py-spy, under a hard timeout, never leaving the target stopped.

``py-spy dump --json --pid P`` (default) or ``py-spy dump --native --pid P`` (text; py-spy refuses
``--native`` with ``--nonblocking``). py-spy pauses the target while it reads it; if py-spy has to be
killed at the timeout, the target's state is checked in /proc and a stopped target (``T``/``t``) gets
SIGCONT, which the record notes. py-spy's stderr never goes into the artefact: the record's reason
holds a one-line summary.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from slime_hangdoctor.bundle import BundleWriter, ProbeClock, ProbeRecord
from slime_hangdoctor.collect.node_probe import NodeContext
from slime_hangdoctor.outcome import Outcome
from slime_hangdoctor.parsers.pyspy import PYSPY

PTRACE_HELP = (
    "py-spy may not ptrace this process: run the doctor as the job's user or as root with "
    "CAP_SYS_PTRACE (docker: --cap-add SYS_PTRACE), or relax kernel.yama.ptrace_scope "
    "(sysctl kernel.yama.ptrace_scope=0)"
)
MISSING_HELP = "py-spy not found on PATH; pip install py-spy"
_KILL_GRACE_S = 1.0
_KILLED_RC = 124  # `timeout` exits 124 (timed out) or 128+N (child killed by signal N)


def find_pyspy() -> str | None:
    """py-spy on PATH, else the one installed next to this Python (a venv's bin/).

    A pyenv shim on PATH gives way to the py-spy beside this Python when there is one: the shim is
    a bash script running `pyenv exec`, ~50 ms of CPU per call, several times a dump's own cost."""
    found = shutil.which("py-spy")
    beside = Path(sys.executable).parent / "py-spy"
    beside_ok = beside.is_file() and os.access(beside, os.X_OK)
    if found and not (beside_ok and _is_pyenv_shim(found)):
        return found
    return str(beside) if beside_ok else found


def _is_pyenv_shim(path: str) -> bool:
    try:
        with open(path, "rb") as fh:
            head = fh.read(2048)
    except OSError:
        return False
    return head.startswith(b"#!") and b"libexec/pyenv" in head


def process_state(pid: int) -> str | None:
    """The one-letter state from /proc/<pid>/stat (R, S, D, T, t, Z, ...); None if it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    close = raw.rfind(b")")
    if close < 0 or close + 2 >= len(raw):
        return None
    return raw[close + 2 : close + 3].decode("ascii", "replace")


def dump_stack(
    writer: BundleWriter,
    pid: int,
    *,
    node_ip: str | None,
    sample: int | None,
    timeout: float,
    native: bool = False,
    pyspy: str | None = None,
) -> ProbeRecord:
    """Dump `pid`'s Python stacks into the bundle (source `pyspy`); never raises."""
    probe = ProbeClock(PYSPY, f"pid{pid}", node_ip, sample)
    fmt = "text" if native else "json"
    meta: dict[str, Any] = {"pid": pid, "format": fmt, "native": native}

    def done(outcome: Outcome, reason: str | None = None, data: bytes | None = None) -> ProbeRecord:
        record = probe.record(outcome, reason, **meta)
        return writer.add(record, data, suffix=".json" if fmt == "json" else ".txt")

    try:
        exe = pyspy or find_pyspy()
        if exe is None:
            return done(Outcome.UNAVAILABLE, MISSING_HELP)
        before = process_state(pid)
        if before is None or _exited(before):
            return done(Outcome.UNAVAILABLE, "process exited")
        if not os.path.isfile(exe):
            return done(Outcome.UNAVAILABLE, f"{MISSING_HELP} ({exe} does not exist)")
        if not os.access(exe, os.X_OK):
            return done(Outcome.UNAVAILABLE, f"{exe} is not executable")
        argv = [exe, "dump", "--pid", str(pid)]
        argv += ["--native"] if native else ["--json"]
        try:
            result = _run(guarded(bounded(argv, timeout), pid, before), timeout)
        except FileNotFoundError:
            return done(Outcome.UNAVAILABLE, f"{MISSING_HELP} ({exe} does not exist)")
        except PermissionError:
            return done(Outcome.UNAVAILABLE, f"{exe} is not executable")
        if result is None:
            _resume_if_stopped(pid, before, meta)
            note = " (the target was left stopped; SIGCONT sent)" if meta.get("sigcont") else ""
            return done(Outcome.TIMED_OUT, f"py-spy did not finish within {timeout:.1f}s{note}")
        rc, out, err = result
        if WATCHER_SIGCONT in err:
            meta["sigcont"] = True  # the watcher found the target stopped and resumed it
            err = err.replace(WATCHER_SIGCONT + b"\n", b"")
        if rc == 0 and out.strip():
            return done(Outcome.OK, None, out)
        outcome, reason = classify_failure(rc, err, pid)
        if rc < 0 or rc >= _KILLED_RC:  # py-spy died of a signal, possibly while attached
            _resume_if_stopped(pid, before, meta)
        return done(outcome, reason)
    except Exception as exc:  # a collector never raises past itself
        return done(Outcome.FAILED, f"py-spy could not be run: {exc!r}"[:300])


def classify_failure(rc: int, stderr: bytes, pid: int) -> tuple[Outcome, str]:
    """Outcome and a one-line reason for a py-spy run that did not produce a dump."""
    text = stderr.decode("utf-8", "replace")
    line = _error_line(text)
    low = text.lower()
    if "operation not permitted" in low or "permission denied" in low or "ptrace" in low:
        return Outcome.DENIED, f"{line} - {PTRACE_HELP}"
    if _exited(process_state(pid)) or "check that the process is running" in low:
        return Outcome.UNAVAILABLE, "process exited"
    if "failed to find python version" in low:
        return Outcome.FAILED, f"not a Python process ({line})"
    return (
        Outcome.FAILED,
        f"py-spy exited with {rc}: {line}" if line else f"py-spy exited with {rc}",
    )


def _exited(state: str | None) -> bool:
    """Gone, or a zombie (dead, not yet reaped by its parent): nothing left to dump."""
    return state is None or state in ("Z", "X")


def _error_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip().startswith("Error:"):
            return line.strip()[:200]
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:200]
    return ""


def bounded(argv: list[str], timeout: float) -> list[str]:
    """`argv` under coreutils `timeout -s KILL`, a watchdog that outlives us.

    We kill py-spy ourselves at `timeout`; the watchdog (1 s later) is for when we cannot: if the
    doctor is killed (SIGKILL, OOM, a closed terminal) while py-spy is wedged on the target, py-spy
    runs in its own session and would hold the target stopped forever. Killed, py-spy's ptrace
    attachment ends and the kernel resumes the target. Without `timeout` on PATH: argv as is."""
    watchdog = shutil.which("timeout")
    if watchdog is None:
        return argv
    # --foreground: `timeout` stays in the dump's process group, which the doctor kills whole at
    # its own timeout (without it, `timeout` and py-spy would move to a group of their own).
    return [
        watchdog,
        "--foreground",
        "--signal=KILL",
        f"{max(0.05, timeout) + _KILL_GRACE_S:.2f}",
        *argv,
    ]


# The watcher: a shell that runs py-spy (under `timeout`) in the dump's own session and process
# group, apart from the doctor, and outlives the doctor. When py-spy ends in failure (killed by
# `timeout`, by a signal, or erroring out) and the target was running before the dump, a target
# now stopped (T/t: a SIGSTOP left pending by a dead tracer) gets SIGCONT, checked twice 0.1 s
# apart. A successful dump detached cleanly: no check, no extra process. The doctor killing the
# group at its own timeout kills the watcher too, and resumes the target itself
# (`_resume_if_stopped`); when the doctor is gone, the watcher is what is left to do it.
WATCHER_SIGCONT = b"slime-hangdoctor watcher: SIGCONT sent"
_WATCHER = r"""
pid=$1; before=$2; shift 2
"$@"
rc=$?
if [ "$rc" -ne 0 ] && [ "$before" != T ] && [ "$before" != t ]; then
  for attempt in 1 2; do
    stat=$(cat "/proc/$pid/stat" 2>/dev/null) || break
    state=${stat##*) }; state=${state%% *}
    case $state in
      T|t) kill -CONT "$pid" 2>/dev/null && echo "slime-hangdoctor watcher: SIGCONT sent" >&2 ;;
    esac
    [ "$attempt" = 1 ] && sleep 0.1
  done
fi
exit "$rc"
"""


def guarded(argv: list[str], pid: int, before: str) -> list[str]:
    """`argv` run by the watcher shell (see `_WATCHER`); argv as is without /bin/sh."""
    shell = "/bin/sh"
    if not os.access(shell, os.X_OK):
        return argv
    return [shell, "-c", _WATCHER, "slime-hangdoctor-watcher", str(pid), before, *argv]


def _run(argv: list[str], timeout: float) -> tuple[int, bytes, bytes] | None:
    """Run argv in its own session; None after killing it (and its children) at the timeout."""
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=max(0.05, timeout))
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        return None
    return proc.returncode, out, err


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        try:
            proc.kill()
        except ProcessLookupError:
            pass
    try:
        proc.communicate(timeout=_KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        pass  # pipes held open by a stray grandchild: give up on them, the child is dead


def _resume_if_stopped(pid: int, before: str, meta: dict[str, Any]) -> None:
    """After killing py-spy: a target that was running but is now stopped gets SIGCONT.

    Checked twice, 0.1 s apart: a SIGSTOP left pending by the dead tracer lands a moment later.
    """
    if before in ("T", "t"):
        meta["state_after"] = process_state(pid)
        return  # stopped by someone else before we came: not ours to resume
    for attempt in range(2):
        if attempt:
            time.sleep(0.1)
        state = process_state(pid)
        meta["state_after"] = state
        if state not in ("T", "t"):
            continue
        try:
            os.kill(pid, signal.SIGCONT)
            meta["sigcont"] = True
        except OSError as exc:
            meta["sigcont_error"] = str(exc)


def NODE_PROBE(ctx: NodeContext) -> list[cf.Future[Any]]:  # noqa: N802 - the spec's entry point
    """A py-spy dump of every slime process of this node (parsers.pyspy.SPEC)."""
    timeout = ctx.timeout(3.0 if ctx.opts.native else 0.0)
    started = ctx.spec.started_for(PYSPY)
    return [
        ctx.pool.submit(
            dump_stack,
            ctx.writer,
            m.pid,
            node_ip=ctx.spec.node_ip,
            sample=ctx.spec.sample,
            timeout=timeout,
            native=ctx.opts.native,
            pyspy=ctx.opts.pyspy,
        )
        for m in ctx.members()
        if m.pid not in started
    ]
