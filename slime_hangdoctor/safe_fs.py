"""Paths other users cannot steer: directories reached one component at a time, files opened
under a directory descriptor, never through a symbolic link someone else planted.

The doctor runs as root from cron and writes into places a user names (`--bundle`, `-o`,
`--bundle-dir`, `--state-file`, `--log-file`, `--prom-file`), some of them in shared directories such as /tmp. And it reads
addresses from the Ray temp dir, which Ray creates mode 0777 without a sticky bit. So:

- a directory is *reliable* when it belongs to root or to a trusted user (the caller; for Ray's
  files also the `--uid` given) and no one else may write to it, unless its sticky bit is set
  (/tmp: others may add entries there, but not rename or remove ours);
- every directory on a path the doctor relies on must be reliable; a symbolic link on the way is
  followed only if root or a trusted user owns it (it then sits in a reliable directory, checked
  before it); anything else is refused with the component and the reason named (`UnsafePath`);
- directories the doctor creates get the exact mode asked for, whatever the umask;
- a file is written whole into a new file of a random name (O_CREAT | O_EXCL | O_NOFOLLOW under
  the directory's descriptor) and renamed over the old one (`replace_in`, `replace_file`): nothing
  is ever written through a link, into a FIFO or a device, or into a file someone else prepared.

These are one-off checks per run (a few `stat` calls per path component).
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import BinaryIO

from slime_hangdoctor.errors import HangDoctorError

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
CLOEXEC = getattr(os, "O_CLOEXEC", 0)
NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | NOFOLLOW | CLOEXEC
_MAX_LINKS = 40  # as the kernel's ELOOP limit
_SHARED_BITS = stat.S_IWGRP | stat.S_IWOTH


class UnsafePath(HangDoctorError):
    """A path the doctor would write through (or trust) is not safe: a component belongs to
    another user, others may write to it, or it is a symbolic link someone else owns."""

    help_text = (
        "Choose a path whose directories belong to root or to you and that no other user can "
        "write (sticky ones such as /tmp excepted), or a new path that the doctor creates."
    )


def trusted_owners(*extra: int | None) -> frozenset[int]:
    """root, the user running the doctor, and any uid given (`--uid`)."""
    return frozenset({0, os.geteuid(), *(u for u in extra if u is not None)})


def shared_problem(st: os.stat_result, owners: Iterable[int]) -> str | None:
    """Why a directory with this `stat` cannot be relied on (another owner, writable by others
    without a sticky bit), or None."""
    if st.st_uid not in frozenset(owners):
        return f"it belongs to uid {st.st_uid}"
    if st.st_mode & _SHARED_BITS and not st.st_mode & stat.S_ISVTX:
        return f"others may write to it (mode {stat.S_IMODE(st.st_mode):04o}, no sticky bit)"
    return None


def private_problem(st: os.stat_result) -> str | None:
    """Why a directory with this `stat` is not the caller's private one, or None."""
    if st.st_uid != os.geteuid():
        return (
            f"it belongs to uid {st.st_uid}, not to the user running the doctor "
            f"(uid {os.geteuid()})"
        )
    if st.st_mode & _SHARED_BITS:
        return f"others may write to it (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def open_dir(
    path: Path | str,
    *,
    owners: Iterable[int] | None = None,
    create: bool = False,
    leaf_mode: int = 0o700,
    parents_mode: int = 0o755,
    follow_leaf: bool = True,
) -> tuple[int, bool]:
    """(a descriptor of the directory `path`, whether this call created it).

    Walked from / one component at a time (O_NOFOLLOW | O_DIRECTORY under the previous
    descriptor); every directory above the leaf must be reliable for `owners` (default: root and
    the caller); a symbolic link is followed only if one of `owners` owns it. With `create`, missing
    directories are made (parents `parents_mode`, the leaf `leaf_mode`, exactly). The leaf itself
    is not judged here: callers check it (`private_problem`, `shared_problem`) on the descriptor;
    with `follow_leaf=False` a leaf that is a symbolic link is refused, whoever owns it.
    Raises UnsafePath, or OSError (ENOTDIR, ENOENT, EACCES...)."""
    trusted = frozenset(owners) if owners is not None else trusted_owners()
    shown = os.path.abspath(path)
    parts = [p for p in shown.split("/") if p]
    fd = os.open("/", _DIR_FLAGS)
    where = "/"
    links = 0
    created = False
    try:
        while parts:
            name = parts.pop(0)
            if name == ".":
                continue
            made = False
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                if not create or name == "..":
                    raise
                mode = leaf_mode if not parts else parents_mode
                try:
                    os.mkdir(name, mode, dir_fd=fd)
                    made = True
                except FileExistsError:
                    pass  # made meanwhile: judged below like any other
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            here = os.path.normpath(os.path.join(where, name))
            if stat.S_ISLNK(st.st_mode):
                if not parts and not follow_leaf:
                    raise UnsafePath(f"refusing {shown}: it is a symbolic link")
                if st.st_uid not in trusted:
                    raise UnsafePath(
                        f"refusing {shown}: {here} is a symbolic link of uid {st.st_uid}"
                    )
                links += 1
                if links > _MAX_LINKS:
                    raise UnsafePath(f"refusing {shown}: too many symbolic links")
                target = os.readlink(name, dir_fd=fd)
                if target.startswith("/"):
                    os.close(fd)
                    fd = os.open("/", _DIR_FLAGS)
                    where = "/"
                parts = [p for p in target.split("/") if p] + parts
                continue
            nfd = os.open(name, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nfd
            where = here
            st = os.fstat(fd)
            if made:
                os.fchmod(fd, leaf_mode if not parts else parents_mode)  # whatever the umask
                created = not parts
            if parts:
                why = shared_problem(st, trusted)
                if why is not None:
                    raise UnsafePath(f"refusing {shown}: {where}: {why}")
        return fd, created
    except BaseException:
        os.close(fd)
        raise


def open_private_dir(path: Path | str, *, parents_mode: int = 0o755) -> int:
    """A descriptor of `path` as the caller's private directory: created 0700 if missing (its
    missing parents `parents_mode`); an existing one must be the caller's and writable by no
    one else. Every directory above it is checked as in `open_dir`. Raises UnsafePath / OSError."""
    fd, _ = open_dir(
        path, create=True, leaf_mode=0o700, parents_mode=parents_mode, follow_leaf=False
    )
    why = private_problem(os.fstat(fd))
    if why is not None:
        os.close(fd)
        raise UnsafePath(f"refusing {os.path.abspath(path)}: {why}")
    return fd


def dir_problem(path: Path | str, owners: Iterable[int]) -> str | None:
    """Why the directory `path` (and every one above it) cannot be relied on for `owners`, or
    None; read-only, never raises."""
    try:
        fd, _ = open_dir(path, owners=owners)
    except UnsafePath as exc:
        return str(exc).split(": ", 1)[-1]
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    try:
        why = shared_problem(os.fstat(fd), owners)
    finally:
        os.close(fd)
    return None if why is None else f"{os.path.abspath(path)}: {why}"


def file_problem(path: Path | str, owners: Iterable[int]) -> str | None:
    """Why the file `path` cannot be trusted to say what root or `owners` wrote (its directories
    unreliable, another owner, writable by others, not a regular file), or None; never raises."""
    path = Path(os.path.abspath(path))
    trusted = frozenset(owners)
    why = dir_problem(path.parent, trusted)
    if why is not None:
        return why
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"{path}: cannot be read ({exc.strerror or exc})"
    if not stat.S_ISREG(st.st_mode):
        return f"{path}: not a regular file"
    if st.st_uid not in trusted:
        return f"{path}: it belongs to uid {st.st_uid}"
    if st.st_mode & _SHARED_BITS:
        return f"{path}: others may write to it (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def read_regular(path: Path | str, limit: int) -> bytes | None:
    """Up to `limit` + 1 bytes of the regular file `path`, opened without blocking (a FIFO or a
    device never hangs the read) and never through a symbolic link; None for anything else."""
    try:
        fd = os.open(path, os.O_RDONLY | NONBLOCK | NOFOLLOW | CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        return fh.read(limit + 1)


def entry_problem(parent: int, name: str) -> str | None:
    """Why the entry `name` of the directory `parent` may not be replaced (a symbolic link, not a
    regular file, another user's, hard-linked), or None (absent, or a plain file of the caller's)."""
    try:
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return "it exists and is a symbolic link (not followed, not replaced)"
    if not stat.S_ISREG(st.st_mode):
        return "it exists and is not a regular file"
    if st.st_uid != os.geteuid():
        return f"it exists and belongs to uid {st.st_uid} (not replaced)"
    if st.st_nlink != 1:
        return "it exists with other hard links (not replaced)"
    return None


def replace_in(
    parent: int, name: str, write: Callable[[BinaryIO], object], *, mode: int = 0o600
) -> None:
    """Replace the entry `name` of the directory `parent` (a descriptor) with a new file that
    `write` fills: made under a random name there (O_CREAT | O_EXCL | O_NOFOLLOW: never an existing
    file, never through a link), set to `mode` whatever the umask, then renamed over `name` (a
    rename replaces what is at `name`, it never writes through it). The new file is removed on any
    failure. Raises OSError."""
    tmp = f".{name}.{secrets.token_hex(8)}.tmp"
    fd = os.open(
        tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW | CLOEXEC, 0o600, dir_fd=parent
    )
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            os.fchmod(fh.fileno(), mode)
        os.replace(tmp, name, src_dir_fd=parent, dst_dir_fd=parent)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=parent)
        except OSError:
            pass
        raise


def replace_file(
    path: Path | str,
    write: Callable[[BinaryIO], object],
    *,
    mode: int = 0o600,
    dir_mode: int | None = None,
    owners: Iterable[int] | None = None,
    only_own: bool = True,
) -> None:
    """Write the file `path` as `write` fills it, safely wherever it is (`replace_in`).

    Its directory is reached as in `open_dir` (with `dir_mode`, made with its missing parents in
    that mode; without, it must exist) and refused where others may write to it without a sticky
    bit, or, with `owners`, where none of them owns it (the directories above it: as open_dir
    judges them). With `only_own`, an existing `path` is
    replaced only when it is a regular file of the caller's with no other link (`entry_problem`):
    a FIFO, a device or a link planted there is refused, never opened. Raises UnsafePath (the
    path and the reason) or OSError."""
    path = Path(os.path.abspath(path))
    parent, _ = open_dir(
        path.parent,
        create=dir_mode is not None,
        leaf_mode=dir_mode or 0o700,
        parents_mode=dir_mode or 0o755,
    )
    try:
        st = os.fstat(parent)
        why = shared_problem(st, owners if owners is not None else (st.st_uid,))
        if why is not None:
            raise UnsafePath(f"refusing {path}: {path.parent}: {why}")
        why = entry_problem(parent, path.name) if only_own else None
        if why is not None:
            raise UnsafePath(f"refusing {path}: {why}")
        replace_in(parent, path.name, write, mode=mode)
    finally:
        os.close(parent)
