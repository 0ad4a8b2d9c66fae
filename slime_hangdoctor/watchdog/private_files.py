"""Files the doctor keeps for itself (the watchdog's state and lock), safe when it runs as root.

A root cron `check` writes into `/var/tmp/slime-hangdoctor/`, a path any user can create first.
So the directory is created 0700 and owned by the caller, a directory that someone else owns or
that others may write to is refused (nobody else can then plant a symlink or swap a file in it),
and every file is opened with O_NOFOLLOW; the state is written to a temporary file in that same
directory and renamed over the old one.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from slime_hangdoctor.errors import HangDoctorError

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class UnsafePath(HangDoctorError):
    """A path the doctor would write through is not safe (foreign owner, writable by others)."""

    help_text = (
        "Choose a --state-file in a directory that only you (the user running the doctor) own "
        "and can write, or remove the directory so that the doctor creates it (mode 0700)."
    )


def private_dir(path: Path) -> Path:
    """`path` as a directory of ours: created 0700 if missing; refused (UnsafePath) if it is a
    symlink, not a directory, owned by another user, or writable by group or others."""
    path = Path(path)
    if not os.path.lexists(path):
        if path.parent != path:
            os.makedirs(path.parent, exist_ok=True)
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass  # created meanwhile: checked below like any other
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise UnsafePath(f"cannot use {path}: {exc.strerror}") from exc
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePath(f"refusing {path}: it is a symbolic link")
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePath(f"refusing {path}: it is not a directory")
    if st.st_uid != os.geteuid():
        raise UnsafePath(
            f"refusing {path}: it belongs to uid {st.st_uid}, not to the user running the "
            f"doctor (uid {os.geteuid()})"
        )
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UnsafePath(
            f"refusing {path}: others may write to it (mode {stat.S_IMODE(st.st_mode):04o})"
        )
    return path


def open_private(path: Path, flags: int) -> int:
    """os.open of a file in a private directory: never through a symlink, 0600 when created."""
    return os.open(path, flags | _NOFOLLOW | _CLOEXEC, 0o600)


def read_private(path: Path) -> bytes:
    """The bytes of `path`, never read through a symlink (OSError ELOOP if it is one)."""
    fd = open_private(path, os.O_RDONLY)
    with os.fdopen(fd, "rb") as fh:
        return fh.read()


def write_atomic(path: Path, data: bytes) -> None:
    """Replace `path` with `data`: a new 0600 file beside it (O_EXCL, O_NOFOLLOW), then rename."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        os.unlink(tmp)  # a leftover of a killed run with our pid (never followed)
    except FileNotFoundError:
        pass
    fd = open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
