"""Fault injection, the PyTorch flight recorder (`--flight-recorder`, opt-in): a debug pipe nobody
reads, a dump that never appears, a "pipe" that is a plain file, and no rank with the recorder on.
A stand-in train rank (standins/rank.py) carries TORCH_NCCL_DEBUG_INFO_PIPE_FILE /
TORCH_FR_DUMP_TEMP_FILE / RANK in its environment, as a slime rank started with them does.

Cases FR1-FR5 of docs/reliability.md."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.reliability.harness import (
    BOUND_S,
    COMMON,
    ROOT,
    TIMEOUT_S,
    CliRun,
    assert_clean,
    assert_other_evidence,
    find_blind,
    probes,
    rank_running,
    require_alone,
    run_cli,
)

pytestmark = pytest.mark.timeout(120)

REAL_DUMP = (
    ROOT / "tests/fixtures/real/gpu-2xh200-nccl-broadcast-hang/run3_hang.fr.fr_hang_rank_0.pkl"
)


def fr_env(d: Path) -> dict[str, str]:
    return {
        "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": str(d / "pipe_"),
        "TORCH_FR_DUMP_TEMP_FILE": str(d / "dump_"),
        "TORCH_FR_BUFFER_SIZE": "2000",
        "RANK": "0",
    }


def attach_fr(out: Path, timeout: float = TIMEOUT_S) -> CliRun:
    args = ("--flight-recorder", "--bundle", str(out), *COMMON, "--timeout", str(timeout))
    run = run_cli("attach", "--local", *args)
    assert_clean(run, bound_s=BOUND_S - TIMEOUT_S + timeout)
    return run


def test_pipe_with_no_reader(tmp_path: Path) -> None:
    """FR1: the rank's FIFO exists but nobody reads it (its watchdog is gone): `unavailable`, and
    the doctor is not blocked by the open (O_NONBLOCK)."""
    with rank_running(tmp_path, "--fr-pipe", str(tmp_path / "pipe_"), env=fr_env(tmp_path)):
        run = attach_fr(tmp_path / "b")
    find_blind(run, "flight_recorder rank0: unavailable: nobody reads", "pipe_0.pipe")
    assert_other_evidence(tmp_path / "b")


def test_dump_never_appears(tmp_path: Path) -> None:
    """FR2: the rank reads the poke but never writes its dump: `timed_out` by the deadline."""
    args = ("--fr-pipe", str(tmp_path / "pipe_"), "--fr-dump", str(tmp_path / "dump_"))
    with rank_running(tmp_path, *args, "--fr-mode", "no-dump", env=fr_env(tmp_path)) as rank:
        run = attach_fr(tmp_path / "b")
        assert rank.pokes() == b"1", "the doctor did not poke the pipe exactly once"
    find_blind(run, f"flight_recorder rank0: timed_out: rank 0 (pid {rank.pid}) wrote no dump")
    assert_other_evidence(tmp_path / "b")


def test_dump_appears(tmp_path: Path) -> None:
    """FR3 (control): a rank that dumps (a real flight-recorder pickle) is read in. The dump is
    asked for after both samples, with what is left of the deadline: a longer one here."""
    args = ("--fr-pipe", str(tmp_path / "pipe_"), "--fr-dump", str(tmp_path / "dump_"))
    dump = ("--fr-mode", "dump", "--fr-dump-from", str(REAL_DUMP))
    with rank_running(tmp_path, *args, *dump, env=fr_env(tmp_path)) as rank:
        run = attach_fr(tmp_path / "b", timeout=8.0)
        assert rank.pokes() == b"1"
    (rec,) = [r for r in probes(tmp_path / "b", "flight_recorder") if r["meta"]["pid"] == rank.pid]
    assert rec["outcome"] == "ok", rec
    assert (tmp_path / "b" / rec["artifact"]).read_bytes() == REAL_DUMP.read_bytes()
    assert not any(b.startswith("no flight-recorder dumps") for b in run.blind_spots())


def test_pipe_is_a_plain_file(tmp_path: Path) -> None:
    """FR4: the pipe path is a regular file: nothing is written to it (`failed`)."""
    (tmp_path / "pipe_0.pipe").write_bytes(b"")
    with rank_running(tmp_path, env=fr_env(tmp_path)):
        run = attach_fr(tmp_path / "b")
    find_blind(run, "flight_recorder rank0: failed:", "is not a FIFO: nothing was written")
    assert (tmp_path / "pipe_0.pipe").read_bytes() == b""


def test_no_rank_has_the_recorder_on(tmp_path: Path) -> None:
    """FR5: no process has the flight-recorder variables: said so, nothing poked."""
    with rank_running(tmp_path) as rank:
        require_alone(rank.pid)
        run = attach_fr(tmp_path / "b")
    find_blind(run, "flight_recorder all: unavailable: no process on this node has")


# --------------------------------------------------------------------------- issue 15 point 9
# The job's environment chooses the pipe and dump paths; the doctor may run as root.

SECRET_FILE_TEXT = b"root:$6$SECRET-shadow-hash$:19000:0:99999:7:::\n"


def _fr_args(tmp_path: Path, mode: str, dump_from: Path, *extra: str) -> tuple[str, ...]:
    return (
        "--fr-pipe", str(tmp_path / "pipe_"), "--fr-dump", str(tmp_path / "dump_"),
        "--fr-mode", mode, "--fr-dump-from", str(dump_from), *extra,
    )  # fmt: skip


def _bundle_bytes(out: Path) -> bytes:
    return b"".join(f.read_bytes() for f in out.rglob("*") if f.is_file())


def test_dump_that_is_a_symlink_is_never_read(tmp_path: Path) -> None:
    """FR6: after the poke the dump path appears as a symlink to a file the rank may not read
    (a root doctor would have read it into the bundle): refused, nothing of it kept."""
    secret = tmp_path / "shadow"
    secret.write_bytes(SECRET_FILE_TEXT)
    secret.chmod(0o600)
    with rank_running(tmp_path, *_fr_args(tmp_path, "link", secret), env=fr_env(tmp_path)) as rank:
        run = attach_fr(tmp_path / "b", timeout=8.0)
        assert rank.pokes() == b"1"
    find_blind(run, "flight_recorder rank0: failed:", "is a symbolic link: refused, not read")
    assert b"SECRET-shadow-hash" not in _bundle_bytes(tmp_path / "b")


def test_pipe_that_is_a_symlink_gets_nothing(tmp_path: Path) -> None:
    """FR7: the "pipe" is a symlink (to a FIFO of someone else's): not opened, nothing written."""
    real_fifo = tmp_path / "elsewhere.fifo"
    os.mkfifo(real_fifo)
    (tmp_path / "pipe_0.pipe").symlink_to(real_fifo)
    with rank_running(tmp_path, env=fr_env(tmp_path)):
        run = attach_fr(tmp_path / "b")
    find_blind(
        run, "flight_recorder rank0: failed:", "is a symbolic link: refused, nothing written"
    )


def test_dump_of_another_uid_is_refused(tmp_path: Path) -> None:
    """FR8: a dump file owned by another uid than the rank's is not read (only what the rank
    itself made is used)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to hand the dump to another uid")
    extra = ("--fr-dump-owner", "65534")
    args = _fr_args(tmp_path, "dump", REAL_DUMP, *extra)
    with rank_running(tmp_path, *args, env=fr_env(tmp_path)):
        run = attach_fr(tmp_path / "b", timeout=8.0)
    find_blind(run, "flight_recorder rank0: failed:", "belongs to uid 65534, not to the rank's uid")
    assert not [r for r in probes(tmp_path / "b", "flight_recorder") if r.get("artifact")]


def test_dump_that_is_no_pickle_is_not_kept(tmp_path: Path) -> None:
    """FR9: whatever the rank writes there that is not a pickle (a copy of a config, a key
    file) is not kept."""
    text = tmp_path / "not-a-dump"
    text.write_bytes(b"aws_secret_access_key = SECRET-notpickle-77\n")
    with rank_running(tmp_path, *_fr_args(tmp_path, "dump", text), env=fr_env(tmp_path)):
        run = attach_fr(tmp_path / "b", timeout=8.0)
    find_blind(run, "flight_recorder rank0: failed:", "is not a pickle")
    assert b"SECRET-notpickle" not in _bundle_bytes(tmp_path / "b")
