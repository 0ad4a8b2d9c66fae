"""Fault injection, GPUs and NCCL: NVML missing (no driver; no nvidia-ml-py) or raising on one GPU,
and an NCCL RAS port that is closed, silent, not RAS, or sends malformed JSON.

NVML raising on one GPU uses standins/nvml_one_gpu_lost/pynvml.py, a fake at the library boundary
placed first on the CLI's PYTHONPATH (GPU 1 raises NVMLError_GpuIsLost). The RAS peers speak the
protocol over 127.0.0.1 with the report bodies a real NCCL 2.28.9 sent; `--ras-port` points the
doctor at them. A stand-in train rank gives `--local` a job to look at.

Cases NV1-NV3 and RS1-RS5 of docs/reliability.md."""

from __future__ import annotations

import ctypes.util
import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures import transforms as tf
from tests.reliability.harness import (
    COMMON,
    ROOT,
    STANDINS,
    CliRun,
    Rank,
    RawServer,
    assert_clean,
    assert_other_evidence,
    cli_env,
    find_blind,
    free_port,
    never_answer,
    probes,
    rank_running,
    ras_speaker,
    raw_server,
    real_ras_bodies,
    run_cli,
)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def rank(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rank]:
    with rank_running(tmp_path_factory.mktemp("rank")) as r:
        yield r


def attach(out: Path, *extra: str, env: dict[str, str] | None = None) -> CliRun:
    run = run_cli("attach", "--local", "--bundle", str(out), *COMMON, *extra, env=env)
    assert_clean(run)
    return run


def with_pythonpath(first: Path) -> dict[str, str]:
    return cli_env(extra={"PYTHONPATH": os.pathsep.join((str(first), str(ROOT)))})


# --------------------------------------------------------------------------- NVML


@pytest.mark.skipif(
    ctypes.util.find_library("nvidia-ml") is not None, reason="this node has an NVIDIA driver"
)
def test_nvml_library_missing(tmp_path: Path, rank: Rank) -> None:
    """NV1: nvidia-ml-py installed, no libnvidia-ml.so (no driver): NVML and GPM `unavailable`
    with the reason; every other source still read."""
    out = tmp_path / "b"
    run = attach(out)
    find_blind(run, "gpus: unavailable: NVML is not available on this node")
    # one blind spot per cause (issue 42 item 3): the probe's own failure says the GPU states are
    # unknown; the generic "no NVML readings" line is not added beside it
    assert not any("no NVML readings" in spot for spot in run.blind_spots()), run.blind_spots()
    assert_other_evidence(out)


def test_pynvml_not_installed(tmp_path: Path, rank: Rank) -> None:
    """NV2: no nvidia-ml-py at all (`import pynvml` fails): said as such."""
    out = tmp_path / "b"
    run = attach(out, env=with_pythonpath(STANDINS / "nvml_not_installed"))
    find_blind(run, "nvml gpus: unavailable: nvidia-ml-py (pynvml) is not installed")
    assert_other_evidence(out)


@pytest.fixture(scope="module")
def one_gpu_lost(rank: Rank, tmp_path_factory: pytest.TempPathFactory) -> tuple[CliRun, Path]:
    out = tmp_path_factory.mktemp("gpu-lost") / "b"
    return attach(out, env=with_pythonpath(STANDINS / "nvml_one_gpu_lost")), out


def test_nvml_raising_on_one_gpu_keeps_the_others(one_gpu_lost: tuple[CliRun, Path]) -> None:
    """NV3: every NVML query about GPU 1 raises (GPU is lost): GPU 0's readings are kept, GPU 1's
    fields hold the error, and the record's reason names GPU 1."""
    _, out = one_gpu_lost
    (rec,) = probes(out, "nvml")
    assert rec["outcome"] == "ok"
    assert "GPU 1 util: ERR NVMLError_GpuIsLost: GPU is lost" in rec["reason"]
    assert "GPU 0" not in rec["reason"]
    doc = json.loads((out / rec["artifact"]).read_text())
    gpus = {g["i"]: g for g in doc["samples"][0]["gpus"]}
    assert gpus[0]["util"] == [0, 0] and gpus[0]["power_w"] == 74.0
    assert gpus[1]["util"] == "ERR NVMLError_GpuIsLost: GPU is lost"
    assert_other_evidence(out)


def test_nvml_raising_on_one_gpu_is_a_blind_spot(one_gpu_lost: tuple[CliRun, Path]) -> None:
    """NV3 (verdict): the verdict names the GPU NVML could not read."""
    find_blind(one_gpu_lost[0], "GPU 1", "GPU is lost")


# --------------------------------------------------------------------------- NCCL RAS


def _ras(out: Path, port: int) -> list[dict[str, object]]:
    return probes(out, "nccl_ras", f":{port}")


def test_ras_port_closed(tmp_path: Path, rank: Rank) -> None:
    """RS1: nothing listens on the RAS port (no communicator on this node): `unavailable`."""
    port = free_port()
    out = tmp_path / "b"
    run = attach(out, "--ras-port", str(port))
    find_blind(
        run,
        f"nccl_ras 127.0.0.1:{port}: unavailable: no NCCL communicator on this node (RAS port closed)",
    )
    assert_other_evidence(out)


def test_ras_silent(tmp_path: Path, rank: Rank) -> None:
    """RS2: the port accepts and never answers: `timed_out` within the probe budget and the run's
    deadline."""
    out = tmp_path / "b"
    with raw_server(never_answer) as ras:
        run = attach(out, "--ras-port", str(ras.port))
    find_blind(run, f"nccl_ras 127.0.0.1:{ras.port}: timed_out: NCCL RAS at", "did not answer")
    assert_other_evidence(out)


def _http_server_reply(conn: socket.socket, server: RawServer) -> None:
    """What an HTTP server on the port answers to `CLIENT PROTOCOL 2`: 400 Bad Request."""
    conn.settimeout(5)
    conn.recv(4096)
    conn.sendall(
        b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n"
        b"Bad request version ('2')\n"
    )


def test_ras_port_is_not_ras(tmp_path: Path, rank: Rank) -> None:
    """RS3: another server owns the port: `failed`, the bytes it sent kept in the artefact."""
    out = tmp_path / "b"
    with raw_server(_http_server_reply) as other:
        run = attach(out, "--ras-port", str(other.port))
    find_blind(run, f"127.0.0.1:{other.port} does not speak the NCCL RAS protocol")
    recs = _ras(out, other.port)
    assert recs and all("400 Bad Request" in (out / str(r["artifact"])).read_text() for r in recs)


def test_ras_malformed_json_falls_back_to_text(tmp_path: Path, rank: Rank) -> None:
    """RS4: the JSON report is cut in half (malformed), the text report is whole: the text report
    is used, nothing is lost, and the JSON bytes are kept verbatim."""
    text, js = real_ras_bodies()
    out = tmp_path / "b"
    cut = tf.truncate_bytes_at(js, len(js) // 2)
    with raw_server(ras_speaker(text, cut)) as ras:
        run = attach(out, "--ras-port", str(ras.port))
    assert not any("nccl_ras" in b or "no NCCL RAS answer" in b for b in run.blind_spots()), (
        run.blind_spots()
    )
    recs = _ras(out, ras.port)
    assert recs and all(r["outcome"] == "ok" for r in recs)
    kept = json.loads((out / str(recs[0]["artifact"])).read_text())
    assert kept["json"]["body"] == cut.decode()


def test_ras_malformed_everything(tmp_path: Path, rank: Rank) -> None:
    """RS5: both reports are malformed: a blind spot saying why neither could be used."""
    out = tmp_path / "b"
    with raw_server(ras_speaker(b"\x00\x01 garbage", b'{"communicators": [')) as ras:
        run = attach(out, "--ras-port", str(ras.port))
    find_blind(run, f"nccl_ras 127.0.0.1:{ras.port}: could not parse: NCCL RAS: no usable body")
    find_blind(run, "no NCCL RAS answer")
    assert_other_evidence(out)
