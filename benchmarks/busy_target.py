"""A busy Python process that measures its own lost progress (for bench_pause.py).

``python -m benchmarks.busy_target STATE_FILE IDLE_THREADS``: the main thread runs small units of
pure-Python work forever and, after each, notes the gap since the previous one; IDLE_THREADS more
threads sit blocked (a Ray worker has a few dozen). STATE_FILE is a 32-byte shared page:

    [0:8]   reset request (the harness increments it)
    [8:16]  reset acknowledged (the target copies [0:8] here once it has reset)
    [16:24] longest gap between two work units since the reset, in nanoseconds
    [24:32] work units done since the reset

A work unit takes a few microseconds, so a gap of milliseconds is time the target was not running:
stopped by a tracer, or not scheduled.
"""

from __future__ import annotations

import mmap
import struct
import sys
import threading
import time

SIZE = 32


def unit_of_work(n: int = 200) -> int:
    total = 0
    for i in range(n):
        total += i * i
    return total


def make_progress(buf: mmap.mmap) -> None:
    last = time.perf_counter_ns()
    seen = struct.unpack_from("q", buf, 0)[0]
    longest = 0
    units = 0
    while True:
        unit_of_work()
        now = time.perf_counter_ns()
        gap = now - last
        last = now
        request = struct.unpack_from("q", buf, 0)[0]
        if request != seen:
            seen = request
            longest = 0
            units = 0
            struct.pack_into("qqq", buf, 8, seen, 0, 0)
            continue
        longest = max(longest, gap)
        units += 1
        struct.pack_into("qq", buf, 16, longest, units)


def main() -> None:
    path, idle = sys.argv[1], int(sys.argv[2])
    stop = threading.Event()
    for i in range(idle):
        threading.Thread(target=stop.wait, name=f"idle-{i}", daemon=True).start()
    with open(path, "r+b") as fh:
        buf = mmap.mmap(fh.fileno(), SIZE)
        make_progress(buf)


if __name__ == "__main__":
    main()
