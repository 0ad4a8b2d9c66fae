"""The doctor's Ray driver in a process of its own (issue 43 item 1; docs/reliability.md RD1-RD4).

The dashboard is the stand-in replaying the real Ray 2.60 answers of the 2x H200 capture, read
as from another machine (`transforms.ray_answer_elsewhere`: the capture's node, this machine's IP,
becomes 192.0.2.77), so the doctor reaches that node through a Ray driver of its own. The GCS the
raylets name is a real listener on this machine that accepts and never answers: Ray's connect
never returns. Each case kills or stops that driver's process (collect/ray_driver.py), found as the
CLI's child, while the run waits for it: the verdict still comes within `--timeout` + 1 s with the
node a named blind spot, no driver outlives the doctor, and `watch` goes on to its next run with
a driver of its own.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest

from tests.fixtures.transforms import ray_answer_elsewhere
from tests.reliability.harness import (
    ROOT,
    SLACK_S,
    CliRun,
    assert_clean,
    cli_env,
    dashboard_routes,
    find_blind,
    http_stub,
    kill_group,
)

pytestmark = pytest.mark.timeout(120)

RECORDED_IP = "192.0.2.2"  # the capture's node (tests/fixtures/real/gpu-2xh200-ray-nccl-hang)
NODE_IP = "192.0.2.77"
DRIVER = "slime_hangdoctor.collect.ray_driver"
TIMEOUT = 8.0  # (Ray's import alone took 3-5 s on the loaded 2-core box: time to reach the GCS)


@contextmanager
def silent_gcs() -> Iterator[tuple[str, list[socket.socket]]]:
    """A GCS port that accepts every connection and never answers (on every address: Ray turns a
    loopback address into the node's own); yields its address and the connections it took."""
    server = socket.create_server(("0.0.0.0", 0), backlog=64)
    taken: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            taken.append(conn)

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}", taken
    finally:
        server.close()
        for conn in taken:
            conn.close()


@contextmanager
def elsewhere_dashboard(gcs: str) -> Iterator[str]:
    routes = {
        path: (status, ray_answer_elsewhere(body, RECORDED_IP, NODE_IP, gcs), kind, delay)
        for path, (status, body, kind, delay) in dashboard_routes().items()
    }
    with http_stub(routes) as dash:
        yield dash.url


def drivers_of(pid: int) -> list[psutil.Process]:
    """The Ray driver processes the CLI `pid` started."""
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    out = []
    for child in children:
        try:
            if DRIVER in " ".join(child.cmdline()):
                out.append(child)
        except psutil.Error:
            continue
    return out


def run_and_hit(
    args: tuple[str, ...], hit: signal.Signals | None, *, every_run: bool = False
) -> tuple[CliRun, set[int]]:
    """The CLI with `args`; `hit` sent to its Ray driver as soon as one is seen (with
    `every_run`, to each new one); returns the run and the pids of every driver seen."""
    argv = (sys.executable, "-m", "slime_hangdoctor", *args)
    t0 = time.monotonic()
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli_env(),
        cwd=str(ROOT),
        start_new_session=True,
    )
    seen: set[int] = set()
    hit_pids: set[int] = set()
    output: dict[str, bytes] = {}

    def talk() -> None:
        output["out"], output["err"] = proc.communicate()

    reader = threading.Thread(target=talk, daemon=True)
    reader.start()
    while proc.poll() is None and time.monotonic() - t0 < 60:
        for driver in drivers_of(proc.pid):
            seen.add(driver.pid)
            if hit is not None and driver.pid not in hit_pids and (every_run or not hit_pids):
                time.sleep(0.3)  # its connect is under way: the run waits for it
                try:
                    driver.send_signal(hit)
                except psutil.NoSuchProcess:
                    continue
                hit_pids.add(driver.pid)
        time.sleep(0.05)
    reader.join(timeout=60)
    wall = time.monotonic() - t0
    kill_group(proc.pid)
    run = CliRun(
        argv,
        proc.returncode if proc.returncode is not None else -9,
        output.get("out", b"").decode(errors="replace"),
        output.get("err", b"").decode(errors="replace"),
        wall,
    )
    for pid in seen:  # no driver outlives the doctor (a stopped one is killed too)
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, (
            f"the Ray driver {pid} outlived the doctor\n{run.describe()}"
        )
    return run, seen


BOUND = TIMEOUT + 1.0 + SLACK_S
ATTACH = ("-f", "json", "--window", "1", "--timeout", str(TIMEOUT))


def test_a_ray_connect_that_never_returns_is_a_blind_spot() -> None:
    """RD1: the GCS accepts and never answers: the node is a blind spot that says so."""
    with silent_gcs() as (gcs, taken), elsewhere_dashboard(gcs) as url:
        run, seen = run_and_hit(("attach", url, *ATTACH), None)
        assert taken, "the driver never reached the GCS"
    assert_clean(run, bound_s=BOUND)
    assert len(seen) == 1, seen
    find_blind(run, f"node {NODE_IP}", "connecting to Ray as a driver took too long")


def test_the_ray_driver_killed_mid_run_is_a_blind_spot() -> None:
    """RD2: the driver's process is killed (as Ray's core worker ends it on a failed check or a
    lost raylet) while the run waits for it: the node's blind spot names how it ended."""
    with silent_gcs() as (gcs, _), elsewhere_dashboard(gcs) as url:
        run, seen = run_and_hit(("attach", url, *ATTACH), signal.SIGKILL)
    assert_clean(run, bound_s=BOUND)
    (pid,) = seen
    find_blind(
        run, f"node {NODE_IP}", f"the doctor's Ray driver (pid {pid}) ended, killed by SIGKILL"
    )


def test_a_stopped_ray_driver_is_a_blind_spot_and_is_killed() -> None:
    """RD3: the driver's process is stopped (SIGSTOP: it reads and answers nothing): the verdict
    comes at the deadline, the node a blind spot; the stopped driver is killed, not left."""
    with silent_gcs() as (gcs, _), elsewhere_dashboard(gcs) as url:
        run, seen = run_and_hit(("attach", url, *ATTACH), signal.SIGSTOP)
    assert_clean(run, bound_s=BOUND)
    assert len(seen) == 1, seen
    find_blind(run, f"node {NODE_IP}", "connecting to Ray as a driver took too long")


def test_watch_goes_on_after_its_ray_driver_is_killed(tmp_path: Path) -> None:
    """RD4: `watch` whose driver is killed in every run: each run ends with its status line, the
    next run starts a driver of its own (none is reused), and the watch does its runs."""
    log = tmp_path / "runs.jsonl"
    args = (
        "watch",
        "--interval",
        "1",
        "--max-runs",
        "3",
        "--window",
        "0.5",
        "--timeout",
        "4",
        "--state-file",
        str(tmp_path / "state.json"),
        "--log-file",
        str(log),
    )
    with silent_gcs() as (gcs, _), elsewhere_dashboard(gcs) as url:
        run, seen = run_and_hit((*args, url), signal.SIGKILL, every_run=True)
    assert "Traceback" not in run.stderr, run.describe()
    assert run.rc in (0, 1, 2, 3), run.describe()
    assert len(log.read_text().splitlines()) == 3, run.describe()
    assert len(seen) == 3, f"a driver per run: {seen}\n{run.describe()}"
    assert os.path.exists(log)
