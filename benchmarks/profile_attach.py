"""Profile one CLI run with py-spy on ourselves (wall clock: idle frames included).

``python -m benchmarks.profile_attach [--cpu] -- slime-hangdoctor attach URL`` records the
command with ``py-spy record --threads --format raw`` and prints the frames by inclusive share,
call plumbing (runpy, importlib, typer's and click's dispatch, thread pools) left out: by default
the main thread's wall clock (``--idle``), with ``--cpu`` the GIL-holding samples of every thread
(``--gil``). `run.py` calls `profile` for a target it missed and puts the table into
docs/performance.md.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.machine import cli_env, env_with, pyspy_path

RATE_HZ = 200
# call plumbing left out of the tables (their callees stay)
PLUMBING = (
    "<frozen runpy>",
    "<frozen importlib",
    "typer/main.py",
    "typer/core.py",
    "_click/core.py",
    "threading.py",
    "concurrent/futures/thread.py",
)
_LINE_NO = re.compile(r":\d+\)$")


def inclusive_by_frame(raw: str, thread: str = "MainThread") -> tuple[int, Counter[str]]:
    """(samples of `thread`, frame -> samples in which it is on the stack) from py-spy raw output."""
    total = 0
    frames: Counter[str] = Counter()
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        parts = stack.split(";")
        if not parts or thread not in parts[0] or not count.isdigit():
            continue
        n = int(count)
        total += n
        seen: set[str] = set()
        for frame in parts[1:]:
            key = _LINE_NO.sub(")", frame)
            if key not in seen and not any(p in key for p in PLUMBING):
                seen.add(key)
                frames[key] += n
    return total, frames


def profile(
    argv: Sequence[str], *, mode: str = "wall", top: int = 25, timeout: float = 300.0
) -> dict[str, Any]:
    """Run `argv` under py-spy record and return its top frames by inclusive share.

    mode "wall": the main thread, idle frames included (where the time to verdict goes);
    mode "cpu": every thread, only samples holding the GIL (where the Python CPU goes; py-spy
    children are not Python and not in it)."""
    if mode not in ("wall", "cpu"):
        raise ValueError(f"mode {mode!r}")
    with tempfile.TemporaryDirectory(prefix="hd-bench-profile-") as tmp:
        raw_path = Path(tmp) / "profile.txt"
        cmd = [
            pyspy_path(),
            "record",
            "--idle" if mode == "wall" else "--gil",
            "--threads",
            "--format",
            "raw",
            "--rate",
            str(RATE_HZ),
            "--output",
            str(raw_path),
            "--",
            *argv,
        ]
        t0 = time.perf_counter()
        subprocess.run(
            cmd, capture_output=True, timeout=timeout, env=env_with(cli_env()), check=False
        )
        wall = time.perf_counter() - t0
        raw = raw_path.read_text() if raw_path.exists() else ""
    total, frames = inclusive_by_frame(raw, "MainThread" if mode == "wall" else "")
    return {
        "argv": list(argv),
        "mode": mode,
        "wall_s_under_profiler": round(wall, 3),
        "samples": total,
        "rate_hz": RATE_HZ,
        "top": [
            {"frame": frame, "share": round(n / total, 3), "seconds": round(n / RATE_HZ, 2)}
            for frame, n in frames.most_common(top)
        ]
        if total
        else [],
    }


def main() -> None:
    args = sys.argv[1:]
    mode = "wall"
    if args and args[0] == "--cpu":
        mode, args = "cpu", args[1:]
    if args and args[0] == "--":
        args = args[1:]
    print(json.dumps(profile(args, mode=mode), indent=2))


if __name__ == "__main__":
    main()
