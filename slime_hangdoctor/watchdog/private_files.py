"""Files the doctor keeps for itself (the watchdog's state and lock), safe when it runs as root.

A root cron `check` writes into `/var/tmp/slime-hangdoctor/`, a path any user can create first.
So the directory is created 0700 and owned by the caller (its missing parents 0755, whatever the
umask), a directory that someone else owns or that others may write to is refused, and so is one
below a directory of another user or one others may write without a sticky bit (nobody else can
then plant a symlink or swap a file in it or on the way to it),
and every file is opened with O_NOFOLLOW; the state is written to a temporary file in that same
directory and renamed over the old one.
"""

from __future__ import annotations

import os
from pathlib import Path

from slime_hangdoctor.safe_fs import UnsafePath, open_private_dir, replace_file

__all__ = ["UnsafePath", "open_private", "private_dir", "read_private", "write_atomic"]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def private_dir(path: Path) -> Path:
    """`path` as a directory of ours: created 0700 if missing (missing parents 0755, whatever the
    umask); refused (UnsafePath) if it is a symlink, not a directory, owned by another user, or
    writable by group or others, or if a directory above it belongs to another user or may be
    written by others without a sticky bit (safe_fs.open_private_dir)."""
    path = Path(path)
    try:
        fd = open_private_dir(path)
    except OSError as exc:
        raise UnsafePath(f"cannot use {path}: {exc.strerror or exc}") from exc
    os.close(fd)
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
    """Replace `path` with `data`: a new 0600 file beside it, then rename (safe_fs.replace_file;
    its directory must be the caller's private one, as `private_dir` made it)."""
    replace_file(path, lambda fh: fh.write(data), owners=(os.geteuid(),), only_own=False)
