"""Node-local GPU / NCCL collectors against real things: this machine's (absent) NVML, real TCP servers
on 127.0.0.1 that speak NCCL's RAS protocol with the bodies a real NCCL 2.28.9 sent (2x H200), and real
FIFOs with a real reader process that dumps a real flight-recorder pickle when poked."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from slime_hangdoctor.bundle import FLIGHT_RECORDER, BundleWriter
from slime_hangdoctor.collect.flight_recorder import (
    FrTarget,
    dump_flight_recorder,
    find_fr_targets,
)
from slime_hangdoctor.collect.nccl_ras import query_ras
from slime_hangdoctor.collect.nvml import read_gpu, sample_gpm, sample_gpus
from slime_hangdoctor.outcome import Outcome
from slime_hangdoctor.parsers.nccl_ras import NCCL_RAS
from slime_hangdoctor.parsers.nvml import GPM, NVML

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
BCAST = REAL / "gpu-2xh200-nccl-broadcast-hang"
RAS_CAPTURES = [
    BCAST / "run3_hang.ras.json",  # MISMATCH: rank 1 never launched the broadcast
    BCAST / "run2_ras_hang.json",
    REAL / "gpu-2xh200-ray-nccl-hang" / "hang" / "ras.json",  # "GPU 0 (NVML 1)"
    REAL / "gpu-2xh200-ray-nccl-hang" / "busy" / "ras.json",  # RUNNING OK
]
FR_PICKLE = BCAST / "run3_hang.fr.fr_hang_rank_0.pkl"


@pytest.fixture
def writer(tmp_path: Path) -> BundleWriter:
    return BundleWriter(tmp_path / "bundle", command="test")


def _artefact(writer: BundleWriter, rel: str | None) -> bytes:
    assert rel is not None
    return (writer.root / rel).read_bytes()


# --------------------------------------------------------------------------- NVML (real, absent here)


def _nvml_present() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        return True
    except Exception:
        return False


needs_no_nvml = pytest.mark.skipif(_nvml_present(), reason="this machine has NVML")


@needs_no_nvml
def test_sample_gpus_without_nvml_is_unavailable(writer: BundleWriter) -> None:
    rec = sample_gpus(
        writer,
        node_ip="10.0.0.1",
        duration_s=1.0,
        interval_s=0.5,
        deadline=time.monotonic() + 5,
    )
    assert rec.source == NVML
    assert rec.outcome is Outcome.UNAVAILABLE
    assert rec.reason is not None and "NVML" in rec.reason
    assert "NVMLError_LibraryNotFound" in rec.reason
    assert rec.artifact is None
    assert writer.records == (rec,)


@needs_no_nvml
def test_sample_gpm_without_nvml_is_unavailable(writer: BundleWriter) -> None:
    rec = sample_gpm(writer, node_ip=None, duration_s=1.0, deadline=time.monotonic() + 5)
    assert rec.source == GPM
    assert rec.outcome is Outcome.UNAVAILABLE
    assert rec.reason is not None and "libnvidia-ml" in rec.reason


@needs_no_nvml
def test_a_gpu_nvml_refuses_becomes_error_strings() -> None:
    """Real pynvml with no library loaded refuses every call: each field is its error string."""
    import pynvml

    with pytest.raises(pynvml.NVMLError):
        pynvml.nvmlInit()
    g = read_gpu(pynvml, 3, object(), {})
    assert g["i"] == 3
    fields = ("util", "power_w", "sm_mhz", "pcie_tx_kbs", "pcie_rx_kbs", "nvlink", "procs")
    for key in (*fields, "proc_util", "clk_reasons"):
        assert g[key] == "ERR NVMLError_Uninitialized: Uninitialized", key
    refused = read_gpu(pynvml, 1, "ERR NVMLError_GpuIsLost: GPU is lost", {})
    assert refused["util"] == refused["procs"] == "ERR NVMLError_GpuIsLost: GPU is lost"


# --------------------------------------------------------------------------- NCCL RAS


class RasServer:
    """A TCP server on 127.0.0.1 speaking the RAS client protocol.

    mode "replay": answers with a real capture (hello, OK, OK, then the body and EOF);
    "silent": accepts and never answers; "garbage": sends bytes that are not the protocol.
    """

    def __init__(self, mode: str, capture: dict[str, Any] | None = None) -> None:
        self.mode = mode
        self.capture = capture or {}
        self.commands: list[list[str]] = []
        self._stop = threading.Event()
        self._conns: list[socket.socket] = []
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(8)
        self._sock.settimeout(0.1)
        self.port = int(self._sock.getsockname()[1])
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                continue
            self._conns.append(conn)
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        seen: list[str] = []
        self.commands.append(seen)
        try:
            if self.mode == "silent":
                self._stop.wait(30)
                return
            if self.mode == "garbage":
                conn.recv(100)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\xff\xfe\x00junk\r\n")
                return
            self._replay(conn, seen)
        except OSError:
            pass
        finally:
            conn.close()

    def _replay(self, conn: socket.socket, seen: list[str]) -> None:
        fmt = "text"
        reader = conn.makefile("rb")
        conn.settimeout(10)
        for raw in reader:
            line = raw.decode().strip()
            seen.append(line)
            if line == "CLIENT PROTOCOL 2":
                conn.sendall(self.capture["text"]["hello"].encode() + b"\n")
            elif line.startswith("TIMEOUT "):
                conn.sendall(self.capture["text"]["timeout"].encode() + b"\n")
            elif line == "SET FORMAT json":
                fmt = "json"
                conn.sendall(self.capture["json"]["format"].encode() + b"\n")
            elif line in ("VERBOSE STATUS", "STATUS"):
                conn.sendall(self.capture[fmt]["body"].encode())
                return

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._sock.close()
        for c in self._conns:
            c.close()


@pytest.fixture
def ras_server() -> Iterator[Any]:
    servers: list[RasServer] = []

    def start(mode: str, capture: dict[str, Any] | None = None) -> RasServer:
        servers.append(RasServer(mode, capture))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


@pytest.mark.parametrize("capture_file", RAS_CAPTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_ras_replays_real_bodies_byte_for_byte(
    writer: BundleWriter, ras_server: Any, capture_file: Path
) -> None:
    # run2_ras_hang.json has bash's `time` output after the JSON document (run2.sh): read the first
    capture, _ = json.JSONDecoder().raw_decode(capture_file.read_text(encoding="utf-8"))
    server = ras_server("replay", capture)
    rec = query_ras(writer, node_ip="192.0.2.2", sample=1, port=server.port, timeout=10)
    assert rec.source == NCCL_RAS
    assert rec.outcome is Outcome.OK, rec.reason
    assert rec.reason is None
    assert (rec.sample, rec.meta["port"], rec.target) == (
        1,
        server.port,
        f"127.0.0.1:{server.port}",
    )
    got = json.loads(_artefact(writer, rec.artifact))
    for fmt in ("text", "json"):
        assert got[fmt]["body"] == capture[fmt]["body"]
        assert got[fmt]["hello"] == "SERVER PROTOCOL 2"
        assert got[fmt]["timeout"] == "OK"
    assert got["json"]["format"] == "OK"
    assert list(got["text"]) == ["hello", "timeout", "elapsed_s", "body"]
    assert list(got["json"]) == ["hello", "timeout", "format", "elapsed_s", "body"]
    # the conversation, in order, on two connections
    text_cmds, json_cmds = server.commands
    assert text_cmds[0] == json_cmds[0] == "CLIENT PROTOCOL 2"
    assert text_cmds[1].startswith("TIMEOUT ") and 1 <= int(text_cmds[1].split()[1]) <= 5
    assert text_cmds[2:] == ["VERBOSE STATUS"]
    assert json_cmds[2:] == ["SET FORMAT json", "VERBOSE STATUS"]


def test_ras_closed_port_is_unavailable(writer: BundleWriter) -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # bound, never listened: nothing answers on it
    rec = query_ras(writer, node_ip=None, sample=0, port=port, timeout=5)
    assert rec.outcome is Outcome.UNAVAILABLE
    assert rec.reason == "no NCCL communicator on this node (RAS port closed)"
    got = json.loads(_artefact(writer, rec.artifact))
    # what ras_gpm.py recorded on the H200 host with no NCCL job running
    assert got == json.loads((BCAST / "run2_ras_nojob.json").read_text(encoding="utf-8"))


def test_ras_silent_server_times_out_within_the_timeout(
    writer: BundleWriter, ras_server: Any
) -> None:
    server = ras_server("silent")
    t0 = time.monotonic()
    rec = query_ras(writer, node_ip=None, sample=0, port=server.port, timeout=1.5)
    took = time.monotonic() - t0
    assert rec.outcome is Outcome.TIMED_OUT
    assert rec.reason is not None and "did not answer" in rec.reason
    assert took < 1.5 + 1.0
    assert len(server.commands) == 2  # both queries tried, each within its share


def test_ras_garbage_fails_and_keeps_the_bytes(writer: BundleWriter, ras_server: Any) -> None:
    server = ras_server("garbage")
    rec = query_ras(writer, node_ip=None, sample=0, port=server.port, timeout=5)
    assert rec.outcome is Outcome.FAILED
    assert rec.reason is not None and "does not speak the NCCL RAS protocol" in rec.reason
    got = json.loads(_artefact(writer, rec.artifact))
    assert got["text"]["hello"] == "HTTP/1.1 400 Bad Request"
    # every byte, the invalid UTF-8 kept as escapes
    assert got["text"]["body"] == "HTTP/1.1 400 Bad Request\r\n\\xff\\xfe\x00junk\r\n"


# --------------------------------------------------------------------------- flight recorder

_READER = r"""
import os, shutil, sys, time
fifo, dump, src, ready = sys.argv[1:5]
fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # as torch's watchdog opens its pipe
open(ready, "w").close()
end = time.monotonic() + 60
while time.monotonic() < end:
    try:
        data = os.read(fd, 64)
    except BlockingIOError:
        data = b""
    if data:
        shutil.copyfile(src, dump)
        break
    time.sleep(0.05)
time.sleep(60)
"""


def _fr_env(tmp_path: Path, rank: int, *, old_names: bool = False) -> dict[str, str]:
    dump_key = "TORCH_NCCL_DEBUG_INFO_TEMP_FILE" if old_names else "TORCH_FR_DUMP_TEMP_FILE"
    return {
        "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": str(tmp_path / "frpipe_"),
        dump_key: str(tmp_path / "frdump_rank_"),
        "RANK": str(rank),
        "WORLD_SIZE": "2",
    }


def test_find_fr_targets_from_env(tmp_path: Path) -> None:
    t = find_fr_targets(_fr_env(tmp_path, 1), 4242)
    assert t == FrTarget(
        pid=4242,
        rank=1,
        pipe_path=str(tmp_path / "frpipe_1.pipe"),
        dump_path=str(tmp_path / "frdump_rank_1"),
    )
    old = find_fr_targets(_fr_env(tmp_path, 0, old_names=True), 7)
    assert old is not None and old.dump_path == str(tmp_path / "frdump_rank_0")
    env = _fr_env(tmp_path, 0)
    assert find_fr_targets({k: v for k, v in env.items() if k != "RANK"}, 7) is None
    assert find_fr_targets({**env, "RANK": "x"}, 7) is None
    assert find_fr_targets({"RANK": "0", "TORCH_FR_DUMP_TEMP_FILE": "/tmp/d_"}, 7) is None


@pytest.fixture
def reader_proc(tmp_path: Path) -> Iterator[Any]:
    procs: list[subprocess.Popen[bytes]] = []

    def start(target: FrTarget, src: Path) -> subprocess.Popen[bytes]:
        ready = tmp_path / f"ready{len(procs)}"
        p = subprocess.Popen(
            [
                sys.executable,
                "-c",
                _READER,
                target.pipe_path,
                target.dump_path,
                str(src),
                str(ready),
            ]
        )
        procs.append(p)
        end = time.monotonic() + 10
        while not ready.exists() and time.monotonic() < end and p.poll() is None:
            time.sleep(0.02)
        assert ready.exists(), "the reader process did not start"
        return p

    yield start
    for p in procs:
        p.kill()
        p.wait(timeout=10)


def test_fr_dump_through_a_real_fifo(
    tmp_path: Path, writer: BundleWriter, reader_proc: Any
) -> None:
    env = _fr_env(tmp_path, 0)
    os.mkfifo(tmp_path / "frpipe_0.pipe")
    target = find_fr_targets(env, 0)
    assert target is not None
    proc = reader_proc(target, FR_PICKLE)
    target = FrTarget(proc.pid, target.rank, target.pipe_path, target.dump_path)
    rec = dump_flight_recorder(writer, target, node_ip="192.0.2.2", timeout=10)
    assert rec.source == FLIGHT_RECORDER
    assert rec.outcome is Outcome.OK, rec.reason
    assert rec.meta["rank"] == 0 and rec.meta["pid"] == proc.pid
    assert rec.artifact is not None and rec.artifact.endswith(".pkl")
    assert _artefact(writer, rec.artifact) == FR_PICKLE.read_bytes()


def test_fr_fifo_without_reader_is_unavailable(tmp_path: Path, writer: BundleWriter) -> None:
    target = find_fr_targets(_fr_env(tmp_path, 1), os.getpid())
    assert target is not None
    os.mkfifo(target.pipe_path)
    rec = dump_flight_recorder(writer, target, node_ip=None, timeout=5)
    assert rec.outcome is Outcome.UNAVAILABLE
    assert rec.reason is not None and "nobody reads" in rec.reason
    assert rec.artifact is None


def test_fr_missing_pipe_is_unavailable(tmp_path: Path, writer: BundleWriter) -> None:
    target = find_fr_targets(_fr_env(tmp_path, 1), os.getpid())
    assert target is not None
    rec = dump_flight_recorder(writer, target, node_ip=None, timeout=5)
    assert rec.outcome is Outcome.UNAVAILABLE
    assert rec.reason is not None and "does not exist" in rec.reason


def test_fr_pipe_that_is_not_a_fifo_fails_untouched(tmp_path: Path, writer: BundleWriter) -> None:
    target = find_fr_targets(_fr_env(tmp_path, 0), os.getpid())
    assert target is not None
    Path(target.pipe_path).write_bytes(b"")
    rec = dump_flight_recorder(writer, target, node_ip=None, timeout=5)
    assert rec.outcome is Outcome.FAILED
    assert rec.reason is not None and "not a FIFO" in rec.reason
    assert Path(target.pipe_path).read_bytes() == b""


def test_fr_dump_that_never_appears_times_out(tmp_path: Path, writer: BundleWriter) -> None:
    target = find_fr_targets(_fr_env(tmp_path, 0), os.getpid())
    assert target is not None
    os.mkfifo(target.pipe_path)
    Path(target.dump_path).write_bytes(FR_PICKLE.read_bytes())  # an old dump: not an answer
    old = os.stat(target.dump_path).st_mtime_ns
    fd = os.open(target.pipe_path, os.O_RDONLY | os.O_NONBLOCK)  # a reader that never dumps
    try:
        t0 = time.monotonic()
        rec = dump_flight_recorder(writer, target, node_ip=None, timeout=1.0)
        took = time.monotonic() - t0
        assert os.read(fd, 16) == b"1"  # it was poked
    finally:
        os.close(fd)
    assert rec.outcome is Outcome.TIMED_OUT
    assert rec.reason is not None and "wrote no dump" in rec.reason
    assert rec.artifact is None
    assert took < 1.0 + 1.0
    assert os.stat(target.dump_path).st_mtime_ns == old
