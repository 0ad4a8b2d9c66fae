"""The sockets and kernel collectors on this machine's real procfs: this test process holds real
loopback connections; their artefacts parse back into what was made; limits and denials are named."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slime_hangdoctor import bundle as bundle_format
from slime_hangdoctor.bundle import BundleWriter
from slime_hangdoctor.collect import kernel as ck
from slime_hangdoctor.collect import sockets as cs
from slime_hangdoctor.outcome import Outcome
from slime_hangdoctor.parsers.kernel import SPEC as KERNEL
from slime_hangdoctor.parsers.kernel import parse_kernel
from slime_hangdoctor.parsers.sockets import parse_sockets


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    srv = socket.create_server(("127.0.0.1", 0))
    cli = socket.create_connection(srv.getsockname()[:2])
    acc, _ = srv.accept()
    cli.sendall(b"y" * 1234)
    time.sleep(0.05)
    yield cli, acc
    for s in (cli, acc, srv):
        s.close()


def _writer(tmp_path: Path) -> BundleWriter:
    return BundleWriter(tmp_path / "b", command="test")


def test_sockets_artefact_holds_this_process_connections(
    tmp_path: Path, pair: tuple[socket.socket, socket.socket]
) -> None:
    cli, acc = pair
    w = _writer(tmp_path)
    rec = cs.record_sockets(w, [os.getpid()], node_ip="10.0.0.9", sample=0, timeout=5.0)
    assert rec.outcome is Outcome.OK and rec.source == bundle_format.SOCKETS
    conns = parse_sockets((w.root / str(rec.artifact)).read_bytes())
    mine = {c.fd: c for c in conns if c.pid == os.getpid()}
    assert mine[acc.fileno()].socket.rx_queue == 1234
    assert mine[cli.fileno()].socket.remote_port == acc.getsockname()[1]
    assert all(c.socket.state != "LISTEN" for c in conns)
    assert all(c.node_ip == "10.0.0.9" for c in conns)


def test_sockets_deadline_is_named(tmp_path: Path) -> None:
    doc, problems = cs.scan_sockets([os.getpid(), 1], None, deadline=time.monotonic() - 1)
    assert doc["fds"] == {} and problems == ["deadline reached: later processes not read"]


def test_sockets_of_unreadable_processes_are_denied(tmp_path: Path) -> None:
    fake = tmp_path / "proc"
    (fake / "4242").mkdir(parents=True)
    (fake / "4242" / "fd").mkdir(mode=0o000)
    try:
        if os.access(fake / "4242" / "fd", os.R_OK):
            pytest.skip("running as root: a mode-000 directory is still readable")
        doc, problems = cs.scan_sockets([4242], None, time.monotonic() + 5, procfs=str(fake))
    finally:
        (fake / "4242" / "fd").chmod(0o700)
    assert problems and "fds not readable" in problems[0]


def test_sockets_table_byte_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cs, "MAX_TABLE_BYTES", 300)
    doc, problems = cs.scan_sockets([os.getpid()], None, time.monotonic() + 5)
    assert all(len(t["text"]) <= 300 for t in doc["tables"])
    assert any("larger than" in p for p in problems) or not doc["fds"]


def test_kernel_artefact_of_this_process(tmp_path: Path) -> None:
    w = _writer(tmp_path)
    path = tmp_path / "io.bin"
    with open(path, "wb") as fh:
        fh.write(os.urandom(1 << 20))
        fh.flush()
        os.fsync(fh.fileno())
    rec = ck.record_kernel(w, [os.getpid()], node_ip=None, sample=1, timeout=5.0)
    assert rec.outcome is Outcome.OK and rec.source == bundle_format.KERNEL
    node = parse_kernel((w.root / str(rec.artifact)).read_bytes())
    (me,) = node.processes
    assert me.pid == os.getpid() and me.state in "RS"
    assert me.io is not None and me.io.wchar >= 1 << 20
    assert node.shm is not None or node.shm_error


def test_kernel_probe_reads_the_main_threads_time_on_and_waiting_for_a_cpu(tmp_path: Path) -> None:
    """/proc/<pid>/schedstat of a real process that spins: its main thread's time on a CPU and
    waiting for one, the part of `markers.cpu_bound` a loaded node needs (issue 34 item 2)."""
    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        w = _writer(tmp_path)
        first = ck.record_kernel(w, [spin.pid], node_ip=None, sample=0, timeout=5.0)
        time.sleep(1.0)
        last = ck.record_kernel(w, [spin.pid], node_ip=None, sample=1, timeout=5.0)
        a, b = (
            parse_kernel((w.root / str(r.artifact)).read_bytes()).processes[0]
            for r in (first, last)
        )
    finally:
        spin.kill()
        spin.wait()
    if a.sched is None:
        pytest.skip("no /proc/<pid>/schedstat on this kernel (CONFIG_SCHED_INFO off)")
    assert b.sched is not None
    wanted = (b.sched.run_ns + b.sched.wait_ns - a.sched.run_ns - a.sched.wait_ns) / 1e9
    # on a CPU or waiting for one for the whole second, however loaded the box
    assert wanted >= 0.8, wanted


def test_kernel_log_unreadable_is_said(tmp_path: Path) -> None:
    doc, _ = ck.scan_kernel(
        [], None, time.monotonic() + 5, kmsg=str(tmp_path / "no-kmsg"), shm=str(tmp_path / "x")
    )
    assert doc["kmsg"]["readable"] is False and "no-kmsg" in doc["kmsg"]["error"]
    assert "error" in doc["shm"]
    node = parse_kernel(__import__("json").dumps(doc))
    assert node.log is not None and not node.log.readable
    assert node.shm is None and node.shm_error


def test_kernel_log_reader_stops_at_the_byte_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    if not os.access(ck.KMSG, os.R_OK):
        pytest.skip("/dev/kmsg not readable here")
    monkeypatch.setattr(ck, "MAX_KMSG_BYTES", 1)
    t0 = time.monotonic()
    out = ck._kmsg(ck.KMSG, time.monotonic() + 5)
    assert out["readable"] is True and time.monotonic() - t0 < 1.0


def test_unreadable_kernel_log_is_a_named_blind_spot_of_its_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from slime_hangdoctor.bundle import open_bundle
    from slime_hangdoctor.load import load_snapshot

    monkeypatch.setattr(ck, "KMSG", str(tmp_path / "kmsg-hidden"))
    w = _writer(tmp_path)
    ck.record_kernel(w, [os.getpid()], node_ip="10.0.0.7", sample=0, timeout=5.0)
    ck.record_kernel(w, [os.getpid()], node_ip="10.0.0.7", sample=1, timeout=5.0)
    w.finish()
    with open_bundle(w.root) as bundle:
        snap = load_snapshot(bundle)
    spots = [s for s in snap.blind_spots if s.startswith("kernel log of 10.0.0.7 not readable")]
    assert len(spots) == 1 and "OOM-killer" in spots[0]  # once per node, not per sample
    assert len(snap.facts(KERNEL)) == 2
