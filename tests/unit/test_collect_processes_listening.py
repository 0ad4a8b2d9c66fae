"""Listening sockets read once per scan (collect.processes.listening_sockets / _listening_from).

Real sockets of this test process and of a real child, on 127.0.0.1 and ::1: the /proc/net tables
read once must give every process the ports and addresses that psutil's per-process
`net_connections` gives it (the scan's result did not change when it stopped asking psutil).
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from slime_hangdoctor.collect.processes import (
    _listening,
    _listening_from,
    listening_sockets,
    scan_processes,
)
from tests.titled import titled_python

CHILD = r"""
import socket, sys, time
a = socket.socket(); a.bind(("127.0.0.1", 0)); a.listen()
b = socket.socket(); b.bind(("127.0.0.1", 0))  # bound, not listening: never reported
print(a.getsockname()[1], b.getsockname()[1], flush=True)
time.sleep(60)
"""


def _have_ipv6() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.fixture
def child() -> Iterator[tuple[int, int, int]]:
    """A child process titled like a Ray worker: (pid, listening port, bound-only port)."""
    proc = subprocess.Popen(
        titled_python("ray::SGLangEngine.init", CHILD),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        listen_port, bound_port = (int(x) for x in proc.stdout.readline().split())
        yield proc.pid, listen_port, bound_port
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_own_sockets_match_psutil_per_process() -> None:
    v4 = socket.socket()
    v4.bind(("127.0.0.1", 0))
    v4.listen()
    sockets = [v4]
    if _have_ipv6():
        v6 = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        v6.bind(("::1", 0))
        v6.listen()
        sockets.append(v6)
    try:
        table = listening_sockets()
        assert table is not None
        ports, addrs = _listening_from(psutil, os.getpid(), table)
        assert v4.getsockname()[1] in ports
        assert f"127.0.0.1:{v4.getsockname()[1]}" in addrs
        if len(sockets) == 2:
            assert f"[::1]:{sockets[1].getsockname()[1]}" in addrs
        assert (ports, addrs) == _listening(psutil, psutil.Process())
    finally:
        for s in sockets:
            s.close()


def test_scan_reports_what_psutil_reports(child: tuple[int, int, int]) -> None:
    pid, listen_port, bound_port = child
    doc = scan_processes(None, roots={pid})
    (row,) = [p for p in doc["processes"] if p["pid"] == pid]
    assert row["listen_ports"] == [listen_port]
    assert row["listen_addrs"] == [f"127.0.0.1:{listen_port}"]
    assert bound_port not in row["listen_ports"]
    assert (row["listen_ports"], row["listen_addrs"]) == _listening(psutil, psutil.Process(pid))


def test_every_process_on_this_node_agrees_with_psutil() -> None:
    table = listening_sockets()
    assert table is not None
    compared = 0
    for proc in psutil.process_iter():
        try:
            expected = _listening(psutil, proc)
            got = _listening_from(psutil, proc.pid, table)
            if got != expected:  # another job opened or closed a socket meanwhile: look again
                table = listening_sockets() or {}
                expected = _listening(psutil, proc)
                got = _listening_from(psutil, proc.pid, table)
        except psutil.Error:
            continue  # gone meanwhile
        assert got == expected, proc.pid
        compared += 1
    assert compared > 1


def test_no_tables_means_ask_psutil(tmp_path: Path) -> None:
    assert listening_sockets(str(tmp_path)) is None


def test_vanished_process_is_no_such_process(tmp_path: Path) -> None:
    with pytest.raises(psutil.NoSuchProcess):
        _listening_from(psutil, 999_999_999, {}, procfs=str(tmp_path))
