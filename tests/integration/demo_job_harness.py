"""Helpers for the demo-job tests: py-spy stacks of the job's processes, matched against the
frame signatures of demo/slime_hangdoctor_demo/faults.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from typing import Any

from slime_hangdoctor_demo.faults import FaultSpec, FrameSignature
from slime_hangdoctor_demo.launch import DemoRun, marked_pids

PYSPY_TIMEOUT_S = 20.0
SETTLE_PATIENCE_S = 20.0


def have_pyspy() -> bool:
    return shutil.which("py-spy") is not None


def pyspy_threads(pid: int) -> list[dict[str, Any]]:
    """`py-spy dump --json` of `pid`: one dict per thread (frames innermost first)."""
    proc = subprocess.run(
        ["py-spy", "dump", "--json", "--pid", str(pid)],
        capture_output=True,
        text=True,
        timeout=PYSPY_TIMEOUT_S,
        check=False,
    )
    if proc.returncode != 0:
        raise AssertionError(f"py-spy dump of {pid} failed: {proc.stderr[-800:]}")
    threads = json.loads(proc.stdout)
    assert isinstance(threads, list)
    return threads


def _name_matches(frame_name: str, wanted: str) -> bool:
    return frame_name == wanted or frame_name.endswith("." + wanted)


def thread_has_frames(thread: dict[str, Any], wanted: tuple[str, ...]) -> bool:
    """Whether `wanted` (innermost first) is a subsequence of the thread's frame names."""
    names = [str(f.get("name", "")) for f in thread.get("frames", [])]
    i = 0
    for name in names:
        if i < len(wanted) and _name_matches(name, wanted[i]):
            i += 1
    return i == len(wanted)


def render(threads: list[dict[str, Any]]) -> str:
    lines = []
    for t in threads:
        lines.append(f"Thread {t.get('thread_id')} {t.get('thread_name')!r}")
        for f in t.get("frames", []):
            lines.append(f"    {f.get('name')} ({f.get('short_filename')}:{f.get('line')})")
    return "\n".join(lines)


def check_signature(run: DemoRun, sig: FrameSignature, processes: dict[str, int]) -> str:
    """Assert that the process `sig.process` shows `sig.frames` in one thread (by name, when
    given); returns the matching thread's rendering."""
    assert sig.process in processes, f"{sig.process} not found among {sorted(processes)}"
    threads = pyspy_threads(processes[sig.process])
    for thread in threads:
        if sig.thread and sig.thread not in str(thread.get("thread_name") or ""):
            continue
        if thread_has_frames(thread, sig.frames):
            return render([thread])
    raise AssertionError(
        f"{sig.process} (pid {processes[sig.process]}) does not show {sig.frames}:\n"
        f"{render(threads)}"
    )


def check_all_signatures(
    run: DemoRun, spec: FaultSpec, *, patience_s: float = SETTLE_PATIENCE_S
) -> dict[str, str]:
    """Every frame signature of `spec` holds. A loaded machine may take a moment to reach the
    blocking call after the job logged the fault as armed, so each check is retried (py-spy
    dumps) until `patience_s` has passed; the last failure is raised."""
    deadline = time.monotonic() + patience_s
    matched: dict[str, str] = {}
    for sig in spec.frames:
        while True:
            try:
                matched[f"{sig.process} {sig.frames}"] = check_signature(run, sig, run.processes())
                break
            except AssertionError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.5)
    return matched


def marked_processes(submission_id: str) -> list[int]:
    """Live pids whose environment carries the demo's marker for this run."""
    return sorted(marked_pids(submission_id))
