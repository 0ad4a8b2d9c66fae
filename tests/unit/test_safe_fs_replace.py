"""safe_fs.replace_file / replace_in: the one atomic replace that the report (-o), the archive,
the manifest, --prom-file and the watchdog's state share (issue 41 M1)."""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import pytest

from slime_hangdoctor.safe_fs import UnsafePath, replace_file


def _write(data: bytes) -> Callable[[BinaryIO], int]:
    return lambda fh: fh.write(data)


def test_a_failed_write_leaves_the_old_file_and_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "r.json"
    target.write_bytes(b"old")

    def fail(fh: object) -> None:
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        replace_file(target, fail)
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_the_file_gets_its_mode_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        replace_file(tmp_path / "a", _write(b"x"), mode=0o640)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o640


def test_a_fifo_or_a_link_at_the_path_is_refused_unopened(tmp_path: Path) -> None:
    """The entry is judged with lstat, never opened: a FIFO without a reader does not block (the
    call runs in a thread that must end at once), a link is neither followed nor replaced."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    raised: list[BaseException] = []

    def call() -> None:
        try:
            replace_file(fifo, _write(b"x"))
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            raised.append(exc)

    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    worker.join(timeout=5)
    assert not worker.is_alive(), "blocked on the FIFO"
    assert isinstance(raised[0], UnsafePath) and "not a regular file" in str(raised[0])
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    (tmp_path / "link").symlink_to(victim)
    with pytest.raises(UnsafePath, match="symbolic link"):
        replace_file(tmp_path / "link", _write(b"x"))
    assert victim.read_bytes() == b"keep" and (tmp_path / "link").is_symlink()


def test_without_only_own_a_link_at_the_path_is_replaced_not_followed(tmp_path: Path) -> None:
    """--prom-file and the state: the rename replaces whatever is at the path (a link included)
    and never writes through it."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    (tmp_path / "hd.prom").symlink_to(victim)
    replace_file(tmp_path / "hd.prom", _write(b"metrics"), only_own=False)
    assert victim.read_bytes() == b"keep"
    assert not (tmp_path / "hd.prom").is_symlink()
    assert (tmp_path / "hd.prom").read_bytes() == b"metrics"


def test_a_directory_others_may_write_without_a_sticky_bit_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(UnsafePath, match="others may write to it"):
        replace_file(shared / "r.md", _write(b"x"))
    assert list(shared.iterdir()) == []
    shared.chmod(0o1777)  # sticky, as /tmp: others cannot rename or remove ours
    replace_file(shared / "r.md", _write(b"x"))
    assert (shared / "r.md").read_bytes() == b"x"
