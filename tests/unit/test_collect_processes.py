"""scan_processes / record_processes on real process trees shaped like a slime node.

The trees are real processes titled the way Ray and SGLang title theirs: an engine actor
`ray::SGLangEngine.init` (a Python process titled with setproctitle, tests/titled.py) whose child
(the HTTP server, listening on a port) starts `sglang::scheduler_TP0`; Ray's own `ray::IDLE` /
`ray::DashboardAgent` stand-ins. The non-Python ones are `sleep` under `exec -a`, which leaves
argv[0] as the title as setproctitle does.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slime_hangdoctor.bundle import BundleWriter, dumps_json
from slime_hangdoctor.collect.processes import record_processes, scan_processes
from slime_hangdoctor.outcome import Outcome
from slime_hangdoctor.parsers.processes import parse_processes
from slime_hangdoctor.parsers.ray_state import RAY_STATE
from slime_hangdoctor.redact import REDACTED
from tests.titled import titled_python

SERVER = r"""
import socket, subprocess, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
subprocess.Popen(["bash", "-c", "exec -a sglang::scheduler_TP0 sleep 120"])
print(s.getsockname()[1], flush=True)
time.sleep(120)
"""
ACTOR = r"""
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", sys.argv[1], "--api-key", "sk-not-for-bundles"])
time.sleep(120)
"""


def _titled(title: str, *argv: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """A non-Python process whose argv[0] is `title` (as Ray's setproctitle leaves it)."""
    cmd = 'exec -a "$0" "$@"'
    return subprocess.Popen(
        ["bash", "-c", cmd, title, *argv],
        env={**os.environ, **(env or {})},
        start_new_session=True,
    )


def _wait_tree(root: int, size: int) -> list[int]:
    import psutil

    deadline = time.monotonic() + 15
    while True:
        kids = psutil.Process(root).children(recursive=True)
        if len(kids) >= size and all(k.cmdline() for k in kids):
            return [k.pid for k in kids]
        assert time.monotonic() < deadline, "process tree did not come up"
        time.sleep(0.1)


@pytest.fixture
def node() -> Iterator[dict[str, int]]:
    env = {"RANK": "3", "MY_SECRET_TOKEN": "hunter2"}
    actor = subprocess.Popen(
        titled_python("ray::SGLangEngine.init", ACTOR, SERVER),
        env={**os.environ, **env},
        start_new_session=True,
    )
    idle = _titled("ray::IDLE", "sleep", "120")
    agent = _titled("ray::DashboardAgent", "sleep", "120")
    other = subprocess.Popen(["sleep", "120"], start_new_session=True)
    procs = [actor, idle, agent, other]
    try:
        server, scheduler = _wait_tree(actor.pid, 2)[:2]
        import psutil

        if psutil.Process(server).cmdline()[0].startswith("sglang::"):
            server, scheduler = scheduler, server
        yield {
            "actor": actor.pid,
            "server": server,
            "scheduler": scheduler,
            "idle": idle.pid,
            "agent": agent.pid,
            "other": other.pid,
        }
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(timeout=10)


def test_scan_keeps_the_slime_tree_and_drops_ray_daemons(node: dict[str, int]) -> None:
    doc = scan_processes("10.1.2.3", extra_pids={node["other"]})
    procs = {p.pid: p for p in parse_processes(dumps_json(doc))}
    assert procs[node["actor"]].cmdline[0] == "ray::SGLangEngine.init"
    server = procs[node["server"]]
    assert server.ppid == node["actor"]
    assert server.listen_ports and server.listen_addrs[0].startswith("127.0.0.1:")
    assert server.cmdline[-2:] == ("--api-key", REDACTED)  # secrets never reach the bundle
    assert procs[node["scheduler"]].title.startswith("sglang::scheduler_TP0")
    env = procs[node["actor"]].env
    assert env["RANK"] == "3" and "MY_SECRET_TOKEN" not in env  # only allow-listed keys
    assert "PATH" not in env and "HOME" not in env
    assert node["other"] in procs  # extra_pids (a Job API driver) come along
    assert node["idle"] not in procs and node["agent"] not in procs
    assert procs[node["actor"]].node_ip == "10.1.2.3"
    assert procs[node["actor"]].cpu_seconds is not None


def test_scan_without_extra_pids_leaves_unrelated_processes_out(node: dict[str, int]) -> None:
    pids = {row["pid"] for row in scan_processes(None)["processes"]}
    assert node["other"] not in pids and os.getpid() not in pids
    assert {node["actor"], node["server"], node["scheduler"]} <= pids


def test_record_processes_stores_the_artefact(node: dict[str, int], tmp_path: Path) -> None:
    writer = BundleWriter(tmp_path / "b", command="test")
    rec = record_processes(writer, node_ip=None, sample=0)
    assert rec.outcome is Outcome.OK and rec.meta["count"] >= 3
    assert rec.artifact is not None and rec.artifact.endswith(".json")
    stored = parse_processes((tmp_path / "b" / rec.artifact).read_text())
    assert node["scheduler"] in {p.pid for p in stored}


# An actor in its constructor (issue 21: the RolloutManager starting its engines). Ray 2.60 lists
# it PENDING_CREATION with the pid of the worker running `__init__` and no node (recorded: demo
# fault startup_engine_never_healthy, analysis/demo_shapes/), so the roots by node leave it out.
STARTUP = Path(__file__).resolve().parents[1] / "fixtures" / "analysis" / "demo_shapes"


def test_an_actor_ray_has_not_placed_is_pending_with_its_pid() -> None:
    from slime_hangdoctor.collect.node import pending_actors, pids_by_node
    from tests.unit.recorded_shapes import recorded

    snap = recorded(STARTUP / "startup_engine_never_healthy.tar.gz")
    rm = next(a for a in snap.joined(RAY_STATE).actors if a.class_name == "RolloutManager")
    assert (rm.state, rm.node_id) == ("PENDING_CREATION", None)
    assert rm.pid not in {pid for pids in pids_by_node(snap).values() for pid in pids}
    assert pending_actors(snap) == {(rm.pid, "RolloutManager")}


def test_a_pending_actor_is_scanned_where_its_pid_carries_its_title() -> None:
    code = "import time\ntime.sleep(120)\n"
    ctor = subprocess.Popen(
        titled_python("ray::RolloutManager.__init__", code), start_new_session=True
    )
    try:
        import psutil

        deadline = time.monotonic() + 15
        # (an empty command line while the child is between fork and exec)
        while (psutil.Process(ctor.pid).cmdline() or [""])[0] != "ray::RolloutManager.__init__":
            assert time.monotonic() < deadline, "the title was never set"
            time.sleep(0.1)
        roots: frozenset[int] = frozenset()  # Ray placed no live actor of the job on this node
        found = scan_processes(None, roots=roots, pending={(ctor.pid, "RolloutManager")})
        assert ctor.pid in {row["pid"] for row in found["processes"]}
        # the same pid under another actor's name is another node's worker: left out
        other = scan_processes(None, roots=roots, pending={(ctor.pid, "SGLangEngine")})
        assert ctor.pid not in {row["pid"] for row in other["processes"]}
    finally:
        os.killpg(ctor.pid, signal.SIGKILL)
        ctor.wait(timeout=10)


# slime's RolloutManager forks sgl-router with multiprocessing (`_start_router`); a SIGKILLed router
# stays its zombie until multiprocessing reaps it (issue 24 item 3, demo fault router_killed)
FORKS_ROUTER = r"""
import multiprocessing, sys, time
def run_router():
    time.sleep(120)
child = multiprocessing.get_context("fork").Process(target=run_router, daemon=True)
child.start()
print(child.pid, flush=True)
time.sleep(120)
"""


def test_a_killed_child_is_kept_as_a_zombie_of_its_parent() -> None:
    import psutil

    rm = subprocess.Popen(
        titled_python("ray::RolloutManager.generate", FORKS_ROUTER),
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert rm.stdout is not None
        router = int(rm.stdout.readline())
        os.kill(router, signal.SIGKILL)
        deadline = time.monotonic() + 15
        while psutil.Process(router).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline, "the child never became a zombie"
            time.sleep(0.05)
        procs = {p.pid: p for p in parse_processes(dumps_json(scan_processes("10.1.2.3")))}
        zombie = procs[router]
        assert zombie.status == "zombie" and zombie.ppid == rm.pid
        # a fork keeps its parent's comm: the title's first 15 bytes (TASK_COMM_LEN)
        assert zombie.name == "ray::RolloutManager.generate"[:15]
        assert zombie.create_time is not None and zombie.cmdline == ()
    finally:
        os.killpg(rm.pid, signal.SIGKILL)
        rm.wait(timeout=10)
