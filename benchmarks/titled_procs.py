"""Many real Python processes that look like slime's Ray train workers, for the scale benchmark.

Each is a real interpreter (``sys.executable``, so a venv stays that venv) titled
``ray::MegatronTrainRayActor.train`` (Ray's title of an actor running `train`) with setproctitle as
Ray titles its workers (with SPT_NOENV=1, as the raylet starts them), blocked in a real call chain
``train -> all_reduce -> wait_for_peer`` reading its stdin. Closing stdin ends it; whatever is
still alive after that is killed.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

TITLE = "ray::MegatronTrainRayActor.train"
WORKER_CODE = """\
import os
import sys

os.environ["SPT_NOENV"] = "1"
import setproctitle

setproctitle.setproctitle(sys.argv[1])


def wait_for_peer(stream):
    return stream.read()


def all_reduce(stream):
    return wait_for_peer(stream)


def train(stream):
    return all_reduce(stream)


sys.stdout.write("ready\\n")
sys.stdout.flush()
train(sys.stdin)
"""


@contextmanager
def titled_processes(count: int, title: str = TITLE) -> Iterator[list[int]]:
    """Start `count` titled workers, wait until they are all blocked, yield their pids, end them."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(count):
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-c", WORKER_CODE, title],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                )
            )
        _wait_ready(procs, timeout=60.0)
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            for stream in (p.stdin, p.stdout):
                try:
                    if stream is not None:
                        stream.close()
                except OSError:
                    pass
        deadline = time.monotonic() + 10.0
        for p in procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5.0)


def _wait_ready(procs: list[subprocess.Popen[bytes]], timeout: float) -> None:
    """Until every worker has said `ready` (it then enters its blocking call at once)."""
    import select

    deadline = time.monotonic() + timeout
    pending = {p.stdout.fileno(): p for p in procs if p.stdout is not None}
    while pending:
        left = deadline - time.monotonic()
        if left <= 0:
            raise RuntimeError(f"{len(pending)} titled workers did not start in {timeout:.0f}s")
        readable, _, _ = select.select(list(pending), [], [], min(1.0, left))
        for fd in readable:
            proc = pending.pop(fd)
            assert proc.stdout is not None
            proc.stdout.readline()
    time.sleep(0.3)  # from `ready` into the blocking read
