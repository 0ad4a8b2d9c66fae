"""Ask a live rank for its PyTorch NCCL flight-recorder dump through its debug pipe. OPT-IN.

With `TORCH_NCCL_DEBUG_INFO_PIPE_FILE=<pipe prefix>` (and a flight-recorder buffer) each rank's
watchdog makes a FIFO `<pipe prefix><rank>.pipe` and polls it; one byte written there makes the rank
dump a pickle to `<dump prefix><rank>` (`TORCH_FR_DUMP_TEMP_FILE`, formerly
`TORCH_NCCL_DEBUG_INFO_TEMP_FILE`) within seconds, without stopping training. This touches the job
(it makes it write a file), so the CLI only does it when asked.

Nothing here blocks: the pipe is opened O_WRONLY|O_NONBLOCK (ENXIO = nobody reads it), the dump is
polled with a deadline, and only a regular file is read.

The job's environment chooses both paths, and the doctor may run as root: the pipe and the dump
are opened with O_NOFOLLOW (never through a symlink), must be owned by the uid the rank runs as
(a FIFO or file someone else planted there is refused), and a dump that is not a pickle (a
pickle starts with the PROTO opcode 0x80) is not kept.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from slime_hangdoctor.bundle import FLIGHT_RECORDER, BundleWriter, ProbeClock, ProbeRecord
from slime_hangdoctor.outcome import Outcome

PIPE_ENV = "TORCH_NCCL_DEBUG_INFO_PIPE_FILE"
DUMP_ENVS = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")  # new name first
MAX_DUMP_BYTES = 256 * 1024 * 1024
_POLL_S = 0.1


@dataclass(frozen=True)
class FrTarget:
    """Where one rank's flight recorder listens and writes."""

    pid: int
    rank: int
    pipe_path: str  # <pipe prefix><rank>.pipe
    dump_path: str  # <dump prefix><rank>


def find_fr_targets(env: Mapping[str, str], pid: int) -> FrTarget | None:
    """The pipe and dump file of a process, from its (allow-listed) environment; None if off."""
    pipe_prefix = env.get(PIPE_ENV, "")
    dump_prefix = next((env[k] for k in DUMP_ENVS if env.get(k)), "")
    rank_text = env.get("RANK", "").strip()
    if not pipe_prefix or not dump_prefix or not rank_text:
        return None
    try:
        rank = int(rank_text)
    except ValueError:
        return None
    if rank < 0:
        return None
    return FrTarget(
        pid=pid,
        rank=rank,
        pipe_path=f"{pipe_prefix}{rank}.pipe",
        dump_path=f"{dump_prefix}{rank}",
    )


def _file_state(path: str) -> tuple[int, int, int] | None:
    """(inode, size, mtime_ns) of a regular file, or None when there is none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_PICKLE_PROTO = b"\x80"


def process_uid(pid: int) -> int | None:
    """The uid a process runs as (the owner of /proc/<pid>), None if it is gone."""
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def _not_owned(path: str, st: os.stat_result, uid: int | None) -> str | None:
    if uid is None:
        return f"{path}: the rank is gone, its uid unknown: not used"
    if st.st_uid != uid:
        return (
            f"{path} belongs to uid {st.st_uid}, not to the rank's uid {uid}: refused "
            "(only what the rank itself made is used)"
        )
    return None


def _poke(pipe_path: str, uid: int | None) -> tuple[Outcome, str] | None:
    """Write one byte to the rank's FIFO; None when done, else why not."""
    try:
        st = os.stat(pipe_path)
    except FileNotFoundError:
        return Outcome.UNAVAILABLE, (
            f"{pipe_path} does not exist (the flight recorder is off: its buffer size is 0, "
            "or the rank has not created its process group)"
        )
    except PermissionError as exc:
        return Outcome.DENIED, f"cannot see {pipe_path}: {exc}"
    except OSError as exc:
        return Outcome.FAILED, f"cannot stat {pipe_path}: {exc}"
    if not stat.S_ISFIFO(st.st_mode):
        return Outcome.FAILED, f"{pipe_path} is not a FIFO: nothing was written to it"
    try:
        fd = os.open(pipe_path, os.O_WRONLY | os.O_NONBLOCK | _NOFOLLOW)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return Outcome.FAILED, f"{pipe_path} is a symbolic link: refused, nothing written"
        if exc.errno == errno.ENXIO:
            return Outcome.UNAVAILABLE, (
                f"nobody reads {pipe_path} (the rank's watchdog is gone or not polling it)"
            )
        if exc.errno in (errno.EACCES, errno.EPERM):
            return Outcome.DENIED, f"cannot open {pipe_path} for writing: {exc}"
        return Outcome.FAILED, f"cannot open {pipe_path}: {exc}"
    try:
        fst = os.fstat(fd)
        if not stat.S_ISFIFO(fst.st_mode):  # replaced between stat and open
            return Outcome.FAILED, f"{pipe_path} is not a FIFO: nothing was written to it"
        foreign = _not_owned(pipe_path, fst, uid)
        if foreign is not None:
            return Outcome.DENIED, f"{foreign}; nothing written"
        try:
            os.write(fd, b"1")
        except BlockingIOError:
            pass  # the pipe is full of earlier pokes: a dump is already asked for
        except OSError as exc:
            return Outcome.FAILED, f"cannot write to {pipe_path}: {exc}"
    finally:
        os.close(fd)
    return None


def _wait_for_dump(
    path: str, before: tuple[int, int, int] | None, end: float
) -> tuple[int, int, int] | None:
    """Poll until a new (or changed) dump has stopped growing; its state, or None by the deadline.

    A dump is taken as finished when two polls in a row see the same non-empty file.
    """
    last: tuple[int, int, int] | None = None
    while True:
        now_state = _file_state(path)
        fresh = now_state is not None and now_state != before and now_state[1] > 0
        if fresh and now_state == last:
            return now_state
        last = now_state if fresh else None
        left = end - time.monotonic()
        if left <= 0:
            return None
        time.sleep(min(_POLL_S, left))


def _read_dump(path: str, uid: int | None) -> bytes | str:
    """The dump's bytes, or why they could not be read: only a regular file (never through a
    symlink) of the rank's own uid, holding a pickle."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return f"{path} is a symbolic link: refused, not read"
        return f"cannot open {path}: {exc}"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return f"{path} is not a regular file"
        foreign = _not_owned(path, st, uid)
        if foreign is not None:
            return foreign
        if st.st_size > MAX_DUMP_BYTES:
            return f"{path} is {st.st_size} bytes, over the {MAX_DUMP_BYTES} byte limit"
        chunks: list[bytes] = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
            if sum(len(c) for c in chunks) > MAX_DUMP_BYTES:
                return f"{path} grew over the {MAX_DUMP_BYTES} byte limit"
        data = b"".join(chunks)
        if not data.startswith(_PICKLE_PROTO):
            return f"{path} is not a pickle (no flight-recorder dump): not kept"
        return data
    except OSError as exc:
        return f"cannot read {path}: {exc}"
    finally:
        os.close(fd)


def dump_flight_recorder(
    writer: BundleWriter, target: FrTarget, *, node_ip: str | None, timeout: float
) -> ProbeRecord:
    """Poke the rank's pipe and bring its dump into the bundle (suffix .pkl, meta rank/pid).

    Ends within `timeout` seconds (plus one poll): unavailable when nobody reads the pipe,
    timed_out when no fresh dump appears in time, failed when the pipe is not a FIFO.
    """
    probe = ProbeClock(FLIGHT_RECORDER, f"rank{target.rank}", node_ip)
    t0 = probe.t0
    meta: dict[str, Any] = {
        "rank": target.rank,
        "pid": target.pid,
        "pipe": target.pipe_path,
        "dump": target.dump_path,
    }

    def record(outcome: Outcome, reason: str | None) -> ProbeRecord:
        return probe.record(outcome, reason, **meta)

    uid = process_uid(target.pid)
    before = _file_state(target.dump_path)
    refused = _poke(target.pipe_path, uid)
    if refused is not None:
        return writer.add(record(*refused))
    state = _wait_for_dump(target.dump_path, before, t0 + max(timeout, 0.0))
    if state is None:
        grew = _file_state(target.dump_path)
        if grew is not None and grew != before and grew[1] > 0:
            data = _read_dump(target.dump_path, uid)
            why = f"rank {target.rank}'s dump was still being written after {timeout:g}s"
            if isinstance(data, str):
                return writer.add(record(Outcome.TIMED_OUT, f"{why}; {data}"))
            return writer.add(record(Outcome.TIMED_OUT, why), data, suffix=".pkl")
        return writer.add(
            record(
                Outcome.TIMED_OUT,
                f"rank {target.rank} (pid {target.pid}) wrote no dump to {target.dump_path} "
                f"within {timeout:g}s (its watchdog may be wedged, or the dump waits for the GIL)",
            )
        )
    data = _read_dump(target.dump_path, uid)
    if isinstance(data, str):
        return writer.add(record(Outcome.FAILED, data))
    return writer.add(record(Outcome.OK, None), data, suffix=".pkl")
