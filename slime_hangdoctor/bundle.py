"""The evidence bundle: a directory (or .tar.gz of it) with a manifest and raw artefacts, verbatim.

Layout::

    <bundle>/manifest.json          schema, tool version, capture times, hosts, one record per probe
    <bundle>/raw/<source>/<name>    the bytes each probe captured, as captured (secrets redacted)

Raw bytes are kept so that a better parser can re-read an old bundle. Directories are 0700 and files
0600: bundles hold stacks and command lines of a user's job.
"""

from __future__ import annotations

import bz2
import errno
import functools
import gzip
import io
import json
import lzma
import os
import re
import shutil
import tarfile
import tempfile
import threading
import time
import weakref
import zlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Literal

from slime_hangdoctor import __version__
from slime_hangdoctor.errors import BundleInvalid, BundleNotWritable
from slime_hangdoctor.outcome import Outcome
from slime_hangdoctor.redact import redact_bytes, redact_text
from slime_hangdoctor.safe_fs import (
    CLOEXEC,
    NOFOLLOW,
    UnsafePath,
    open_dir,
    private_problem,
    read_regular,
    replace_file,
    replace_in,
)

_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | NOFOLLOW | CLOEXEC
BUNDLE_SCHEMA = "slime-hangdoctor.bundle/1"
MANIFEST = "manifest.json"

# The one source the writer itself names: a flight-recorder pickle is stored byte for byte (add()).
# Every other source's name lives beside its parser (parsers/<source>.py), and sources.SPECS lists
# them all.
FLIGHT_RECORDER = "flight_recorder"  # the pickle a rank dumped; meta: rank, pid


_SAFE = re.compile(r"[^A-Za-z0-9._\-]+")


def safe_name(text: str) -> str:
    """A file-name-safe rendering of a target (URL, IP, pid)."""
    return _SAFE.sub("_", text).strip("_.")[:120] or "_"  # never "." or ".."


_SUFFIX = re.compile(r"\.[A-Za-z0-9]{1,16}")


def safe_suffix(suffix: str) -> str:
    """`suffix` if it is a plain file extension (`.json`), else one made of its safe characters
    (a remote node's answer is untrusted: `/../../etc/cron.d/x` becomes `.etc_cron.d_x`)."""
    if _SUFFIX.fullmatch(suffix):
        return suffix
    return "." + safe_name(suffix)[:32]


@dataclass(frozen=True)
class ProbeRecord:
    """One probe's outcome, as the manifest keeps it."""

    source: str
    target: str
    outcome: Outcome
    reason: str | None = None
    artifact: str | None = None  # path relative to the bundle root
    node_ip: str | None = None
    sample: int | None = None  # 0 / 1 for the two samples of the window; None for one-off probes
    started_at: float = 0.0
    elapsed_s: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["outcome"] = self.outcome.value
        return d

    @classmethod
    def from_json(cls, d: Any) -> ProbeRecord:
        try:
            if not isinstance(d, dict):
                raise TypeError("a probe record is not an object")
            return cls(
                source=str(d["source"]),
                target=str(d["target"]),
                outcome=Outcome(d["outcome"]),
                reason=_opt(d.get("reason"), str),
                artifact=_opt(d.get("artifact"), str),
                node_ip=_opt(d.get("node_ip"), str),
                sample=_opt(d.get("sample"), int),
                started_at=float(d.get("started_at") or 0.0),
                elapsed_s=float(d.get("elapsed_s") or 0.0),
                meta=dict(d.get("meta") or {}),
            )
        except (KeyError, ValueError, TypeError, OverflowError) as exc:
            raise BundleInvalid(f"manifest probe record is malformed: {exc!r}"[:300]) from exc


@dataclass(frozen=True)
class ProbeClock:
    """A probe's identity and start: `record` makes its ProbeRecord, timed up to that call.

    One per probe run; a collector builds every record of that run through it, so the start time,
    elapsed time, node and sample are set in one place."""

    source: str
    target: str
    node_ip: str | None = None
    sample: int | None = None
    started_at: float = field(default_factory=time.time)
    t0: float = field(default_factory=time.monotonic)

    def record(self, outcome: Outcome, reason: str | None = None, **meta: Any) -> ProbeRecord:
        return ProbeRecord(
            self.source,
            self.target,
            outcome,
            reason,
            node_ip=self.node_ip,
            sample=self.sample,
            started_at=self.started_at,
            elapsed_s=time.monotonic() - self.t0,
            meta=meta,
        )


@dataclass(frozen=True)
class Manifest:
    schema: str
    tool_version: str
    created_at: float
    command: str
    hosts: tuple[str, ...]
    window_s: float
    sample_times: tuple[float, ...]
    probes: tuple[ProbeRecord, ...]
    target: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    finished_at: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": self.schema,
            "tool_version": self.tool_version,
            "created_at": self.created_at,
            "finished_at": self.finished_at,
            "command": self.command,
            "hosts": list(self.hosts),
            "window_s": self.window_s,
            "sample_times": list(self.sample_times),
            "target": self.target,
            "options": self.options,
            "probes": [p.to_json() for p in self.probes],
        }

    @classmethod
    def from_json(cls, d: Any) -> Manifest:
        if not isinstance(d, dict):
            raise BundleInvalid("manifest.json is not a JSON object")
        schema = d.get("schema")
        if not isinstance(schema, str) or not schema.startswith("slime-hangdoctor.bundle/"):
            raise BundleInvalid(f"manifest.json has an unknown schema: {schema!r}")
        probes = d.get("probes")
        if not isinstance(probes, list):
            raise BundleInvalid("manifest.json has no probe list")
        try:
            return cls(
                schema=schema,
                tool_version=str(d.get("tool_version", "?")),
                created_at=float(d.get("created_at") or 0.0),
                finished_at=d.get("finished_at"),
                command=str(d.get("command", "?")),
                hosts=tuple(str(h) for h in d.get("hosts") or ()),
                window_s=float(d.get("window_s") or 0.0),
                sample_times=tuple(float(t) for t in d.get("sample_times") or ()),
                target=dict(d.get("target") or {}),
                options=dict(d.get("options") or {}),
                probes=tuple(ProbeRecord.from_json(p) for p in probes),
            )
        except (TypeError, ValueError, OverflowError) as exc:
            raise BundleInvalid(f"manifest.json is malformed: {exc!r}") from exc


class BundleWriter:
    """Writes artefacts as probes finish (thread-safe); `finish()` writes the manifest."""

    def __init__(
        self,
        root: Path,
        *,
        command: str,
        window_s: float = 0.0,
        target: dict[str, Any] | None = None,
        options: dict[str, Any] | None = None,
        known_secrets: tuple[str, ...] = (),
    ) -> None:
        # Absolute: `--bundle .` has a name to put the tarball beside.
        self.root = Path(os.path.abspath(root))
        self._lock = threading.Lock()
        self._records: list[ProbeRecord] = []
        self._names: set[str] = set()
        self._hosts: list[str] = []
        self._sample_times: dict[int, float] = {}
        self._known_secrets = known_secrets
        self.command = command
        self.window_s = window_s
        self.target = dict(target or {})
        self.options = dict(options or {})
        self.created_at = time.time()
        try:
            # Every write below goes through this descriptor: nothing swapped on the path later
            # (a middle directory renamed, a symlink planted) can send a file elsewhere.
            self._fd = _claim_root(self.root)
        except UnsafePath as exc:
            raise BundleNotWritable(
                f"cannot write an evidence bundle at {self.root}: {exc}"
            ) from exc
        except OSError as exc:
            raise BundleNotWritable(
                f"cannot write an evidence bundle at {self.root}: {exc.strerror or exc}"
            ) from exc
        weakref.finalize(self, os.close, self._fd)

    def note_host(self, host: str | None) -> None:
        if host:
            with self._lock:
                if host not in self._hosts:
                    self._hosts.append(host)

    def note_sample(self, index: int, at: float) -> None:
        with self._lock:
            self._sample_times.setdefault(index, at)

    def add(
        self, record: ProbeRecord, data: bytes | str | None = None, *, suffix: str = ".txt"
    ) -> ProbeRecord:
        """Store `data` verbatim, secrets blanked (bytes that are not UTF-8 too: `redact_bytes`),
        and remember the record; returns it with its path."""
        self.note_host(record.node_ip)
        artifact = None
        if data is not None:
            if isinstance(data, str):
                data = redact_text(data, self._known_secrets).encode("utf-8", "replace")
            elif not (record.source == FLIGHT_RECORDER and suffix == ".pkl"):
                # a flight-recorder pickle is kept byte for byte (blanking would break its
                # framing; the loader turns only its scalars to text); every other artefact is
                # redacted whatever suffix a node's answer claims
                data = redact_bytes(data, self._known_secrets)
            artifact = self._unique_name(record, suffix)
            try:
                self._write(artifact, data)
            except OSError as exc:
                record = _with(
                    record, artifact=None, reason=_join(record.reason, f"artefact not saved: {exc}")
                )
                artifact = None
        stored = _with(record, artifact=artifact, reason=record.reason)
        with self._lock:
            self._records.append(stored)
        return stored

    def _write(self, artifact: str, data: bytes) -> None:
        """Write `data` at `artifact` (raw/<source>/<node>/<name>) under the bundle's descriptor:
        each folder made 0700 and opened O_NOFOLLOW under the one before, the file created 0600
        O_NOFOLLOW under the last; a path that would leave the bundle is refused."""
        parts = artifact.split("/")
        inside = os.path.normpath(os.path.join(self.root, artifact))
        if any(p in ("", ".", "..") for p in parts) or not inside.startswith(f"{self.root}/"):
            raise OSError(errno.EPERM, f"{artifact!r} would land outside the bundle")
        fd = os.dup(self._fd)
        try:
            for folder in parts[:-1]:
                made = True
                try:
                    os.mkdir(folder, 0o700, dir_fd=fd)
                except FileExistsError:
                    made = False
                nfd = os.open(folder, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = nfd
                if made:
                    os.fchmod(fd, 0o700)  # whatever the umask
            out = os.open(
                parts[-1],
                os.O_WRONLY | os.O_CREAT | os.O_TRUNC | NOFOLLOW | CLOEXEC,
                0o600,
                dir_fd=fd,
            )
        finally:
            os.close(fd)
        with os.fdopen(out, "wb") as fh:
            fh.write(data)

    def _unique_name(self, record: ProbeRecord, suffix: str) -> str:
        # Every part of the path is made safe: the target (a URL may carry user:password@), the
        # node, the source and the suffix alike (records of remote node tasks come from another
        # process, and a node's answer is untrusted input).
        suffix = safe_suffix(suffix)
        source = safe_name(record.source)
        node = safe_name(record.node_ip or "local")
        base = safe_name(redact_text(record.target, self._known_secrets))
        if record.sample is not None:
            base += f".s{int(record.sample)}"
        with self._lock:
            name = f"raw/{source}/{node}/{base}{suffix}"
            n = 1
            while name in self._names:
                n += 1
                name = f"raw/{source}/{node}/{base}.{n}{suffix}"
            self._names.add(name)
        return name

    @property
    def records(self) -> tuple[ProbeRecord, ...]:
        with self._lock:
            return tuple(self._records)

    def manifest(self) -> Manifest:
        with self._lock:
            times = tuple(self._sample_times[k] for k in sorted(self._sample_times))
            return Manifest(
                schema=BUNDLE_SCHEMA,
                tool_version=__version__,
                created_at=self.created_at,
                finished_at=time.time(),
                command=self.command,
                hosts=tuple(self._hosts),
                window_s=self.window_s,
                sample_times=times,
                probes=tuple(self._records),
                target=self.target,
                options=self.options,
            )

    def finish(self) -> Manifest:
        manifest = self.manifest()
        text = json.dumps(manifest.to_json(), indent=1, sort_keys=False)
        text = redact_text(text, self._known_secrets)
        try:
            replace_in(self._fd, MANIFEST, lambda fh: fh.write(text.encode("utf-8")))
        except OSError as exc:
            raise BundleNotWritable(f"cannot write {self.root / MANIFEST}: {exc}") from exc
        return manifest


def archive(root: Path, dest: Path | None = None) -> Path:
    """Pack a bundle directory into `<root>.tar.gz` (0600, the caller's).

    Written as safe_fs.replace_file writes: a new file (O_EXCL | O_NOFOLLOW, a random name) in its
    directory, renamed over `dest` when complete: a root run in a shared directory never writes
    into a file or through a symlink someone planted there. An existing `dest` is replaced only if
    it is a regular file of the caller's; anything else is refused."""
    root = Path(os.path.abspath(root))
    dest = Path(os.path.abspath(dest or root.with_name(root.name + ".tar.gz")))

    def pack(fh: BinaryIO) -> None:
        with tarfile.open(fileobj=fh, mode="w:gz") as tar:
            tar.add(root, arcname=root.name)

    try:
        replace_file(dest, pack, owners=(0, os.geteuid()))
    except (UnsafePath, OSError) as exc:
        raise BundleNotWritable(f"cannot write {dest}: {_why(exc)}") from exc
    return dest


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)


class Bundle:
    """A bundle opened for reading (directory, or a .tar.gz unpacked to a private temp dir)."""

    def __init__(self, root: Path, manifest: Manifest, tmp: Path | None = None) -> None:
        self.root = root
        self.manifest = manifest
        self._tmp = tmp

    @functools.cached_property
    def real_root(self) -> Path:
        """The bundle's directory, symbolic links resolved (once: every read checks against it)."""
        return self.root.resolve()

    def read(self, record: ProbeRecord) -> bytes | None:
        """The raw bytes of a record's artefact, or None when it has none or it is gone."""
        if not record.artifact:
            return None
        path = (self.root / record.artifact).resolve()
        if self.real_root not in path.parents:
            return None  # never read outside the bundle
        # A regular file only, opened without blocking: a FIFO or a device planted as an
        # artefact is a blind spot, never a read that waits forever.
        try:
            data = read_regular(path, MAX_ARTEFACT_BYTES)
        except OSError:
            return None
        if data is None or len(data) > MAX_ARTEFACT_BYTES:
            return None  # no probe writes so much: not an artefact of ours (a blind spot)
        return data

    def records(self, source: str | None = None) -> Iterator[ProbeRecord]:
        for rec in self.manifest.probes:
            if source is None or rec.source == source:
                yield rec

    def close(self) -> None:
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> Bundle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_bundle(path: Path) -> Bundle:
    """Open a bundle directory or .tar.gz; raises BundleInvalid with a reason."""
    path = Path(path)
    if not path.exists():
        raise BundleInvalid(f"{path} does not exist")
    tmp: Path | None = None
    root = path
    if path.is_file():
        tmp = Path(tempfile.mkdtemp(prefix="hangdoctor-bundle-"))
        try:
            _unpack(path, tmp)
        except (tarfile.TarError, OSError, EOFError, zlib.error, lzma.LZMAError) as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise BundleInvalid(f"{path} is not a readable bundle archive: {exc}") from exc
        found = sorted(tmp.rglob(MANIFEST))
        if not found:
            shutil.rmtree(tmp, ignore_errors=True)
            raise BundleInvalid(f"{path} holds no {MANIFEST}")
        root = found[0].parent
    manifest_path = root / MANIFEST
    try:
        data = read_regular(manifest_path, MAX_MANIFEST_BYTES)
        if data is None or len(data) > MAX_MANIFEST_BYTES:
            raise OSError(
                errno.EINVAL, f"not a regular file of at most {MAX_MANIFEST_BYTES // 2**20} MiB"
            )
        containers = data.count(b"{") + data.count(b"[")
        if containers > MAX_MANIFEST_CONTAINERS:
            raise BundleInvalid(
                f"{manifest_path} is not read: it holds {containers} JSON objects and lists "
                f"(at most {MAX_MANIFEST_CONTAINERS}: a manifest of ours holds about 5 a probe)"
            )
        raw = data.decode("utf-8")
        manifest = Manifest.from_json(json.loads(raw))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        raise BundleInvalid(f"{manifest_path} is not readable: {exc}") from exc
    except BundleInvalid:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Bundle(root, manifest, tmp)


# The manifest is decoded whole, before any other cap applies: bounded by its size and by the JSON
# objects and lists it may make (each costs ~60 bytes or more once built: a 40 MiB manifest of
# tiny lists took about 1 GB). A manifest of ours costs ~470 bytes and 2-5 containers a probe
# (the recorded demo bundles: 100 probes, 46 KB): the caps hold ~70,000 probes, beyond any real
# cluster's run.
MAX_MANIFEST_BYTES = 32 * 1024 * 1024
MAX_MANIFEST_CONTAINERS = 500_000

# An archive from a bug report is untrusted: what it may unpack to is capped before anything is
# written. No probe writes more than MAX_ARTEFACT_BYTES (a flight-recorder dump: 256 MiB).
MAX_ARTEFACT_BYTES = 300 * 1024 * 1024
MAX_UNPACKED_BYTES = 1024 * 1024 * 1024  # the whole bundle
MAX_MEMBERS = 100_000
MAX_RATIO = 100  # unpacked bytes per archive byte (evidence JSON packs ~10:1; zeros ~1000:1)
_RATIO_FLOOR = 32 * 1024 * 1024  # below this much, the ratio does not matter
# tarfile reads an extended header (GNU long name 'L'/'K', pax 'x'/'g') whole, and processes a
# chain of them recursively, before a caller sees the member: both are capped before tarfile runs.
# tarfile itself writes a pax header of a few hundred bytes (a long or non-ASCII path).
MAX_HEADER_BYTES = 64 * 1024
MAX_HEADER_CHAIN = 8  # extended headers in a row before one member
_COPY_CHUNK = 1024 * 1024
_EXTENDED = {
    tarfile.GNUTYPE_LONGNAME: "GNU long name",
    tarfile.GNUTYPE_LONGLINK: "GNU long link",
    tarfile.XHDTYPE: "pax",
    tarfile.XGLTYPE: "pax global",
    tarfile.SOLARIS_XHDTYPE: "Solaris pax",
}
_PAX_REFUSED = (b" size=", b"GNU.sparse")  # a size that moves the next header; sparse maps


def _unpack(path: Path, dest: Path) -> None:
    """Check every header of the archive at `path` (`_scan_headers`), then unpack it into `dest`
    (`_safe_extract`). Both passes read the same open file, decompressed the same way (tarfile is
    given the compression that the magic bytes name, the ones `r:*` reads)."""
    with open(path, "rb") as fh:
        archive_bytes = os.fstat(fh.fileno()).st_size
        magic = fh.read(6)
        fh.seek(0)
        mode: Literal["r:", "r:gz", "r:bz2", "r:xz"] = "r:"
        stream: io.BufferedIOBase = fh
        if magic.startswith(b"\x1f\x8b"):
            mode, stream = "r:gz", gzip.GzipFile(fileobj=fh, mode="rb")
        elif magic.startswith(b"BZh"):
            mode, stream = "r:bz2", bz2.BZ2File(fh)
        elif magic.startswith(b"\xfd7zXZ\x00"):
            mode, stream = "r:xz", lzma.LZMAFile(fh)  # noqa: SIM115 - closed below
        try:
            _scan_headers(stream, archive_bytes)
        finally:
            if stream is not fh:
                stream.close()  # not `fh`: a decompressor leaves a file object it was given open
        fh.seek(0)
        with tarfile.open(fileobj=fh, mode=mode) as tar:
            _safe_extract(tar, dest, archive_bytes)


def _scan_headers(stream: io.BufferedIOBase, archive_bytes: int) -> None:
    """Walk the tar stream block by block as tarfile will, checking each header before its data
    is read: an extended header over MAX_HEADER_BYTES (a 1 MB .tar.gz declaring a 500 MB long
    name made tarfile buffer it whole), a chain of more than MAX_HEADER_CHAIN of them, a pax
    header that sets a size or a sparse map, a sparse, link or device member, and the size caps
    of `_safe_extract` are refused (tarfile.TarError). Data blocks are skipped in 1 MiB reads."""
    total = members = chain = 0
    while True:
        block = stream.read(tarfile.BLOCKSIZE)
        if len(block) < tarfile.BLOCKSIZE or block.count(0) == tarfile.BLOCKSIZE:
            return  # the end (or a truncated archive: tarfile stops there too)
        try:
            info = tarfile.TarInfo.frombuf(block, "utf-8", "surrogateescape")
        except tarfile.HeaderError as exc:
            raise tarfile.TarError(f"a damaged tar header ({exc})") from None
        members += 1
        if members > 2 * MAX_MEMBERS:
            raise tarfile.TarError(f"more than {MAX_MEMBERS} members")
        if info.size < 0:
            raise tarfile.TarError(f"member {info.name!r} has a negative size")
        kind = _EXTENDED.get(info.type)
        if kind is not None:
            chain += 1
            if info.size > MAX_HEADER_BYTES:
                raise tarfile.TarError(
                    f"a {kind} header of {info.size} bytes (over {MAX_HEADER_BYTES}): "
                    "not an archive that slime-hangdoctor wrote"
                )
            if chain > MAX_HEADER_CHAIN:
                raise tarfile.TarError(f"more than {MAX_HEADER_CHAIN} extended headers in a row")
            body = stream.read(_blocks(info.size))
            pax = info.type not in (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK)
            if pax and any(word in body[: info.size] for word in _PAX_REFUSED):
                raise tarfile.TarError(f"a {kind} header that sets a size or a sparse map")
            continue
        chain = 0
        if info.type == tarfile.GNUTYPE_SPARSE:
            raise tarfile.TarError(f"member {info.name!r} is a sparse file")
        if info.isdir():
            if info.size:
                raise tarfile.TarError(f"directory {info.name!r} has a size")
            continue
        if info.type not in (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.CONTTYPE):
            raise tarfile.TarError(f"member {info.name!r} is not a plain file")
        total = _counted(info, total, archive_bytes)
        left = _blocks(info.size)
        while left:
            chunk = stream.read(min(left, _COPY_CHUNK))
            if not chunk:
                return  # truncated: tarfile reports it
            left -= len(chunk)


def _blocks(size: int) -> int:
    """`size` rounded up to whole tar blocks."""
    return -(-size // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE


def _counted(info: tarfile.TarInfo, total: int, archive_bytes: int) -> int:
    """`total` with this member's size added, within the caps (one member, all of them, the
    ratio to the archive's own size), for the header walk and the extraction alike."""
    if info.size > MAX_ARTEFACT_BYTES:
        raise tarfile.TarError(
            f"member {info.name!r} is {info.size} bytes, over {MAX_ARTEFACT_BYTES}"
        )
    total += info.size
    _check_total(total, archive_bytes)
    return total


def _check_total(total: int, archive_bytes: int) -> None:
    if total > MAX_UNPACKED_BYTES:
        raise tarfile.TarError(f"it unpacks to more than {MAX_UNPACKED_BYTES} bytes")
    if total > _RATIO_FLOOR and total > MAX_RATIO * max(1, archive_bytes):
        raise tarfile.TarError(
            f"it unpacks to over {MAX_RATIO} times its own size ({total} bytes from "
            f"{archive_bytes}): not a bundle"
        )


def _safe_extract(tar: tarfile.TarFile, dest: Path, archive_bytes: int) -> None:
    """Unpack a checked archive: plain files and folders inside `dest` only, no sparse member,
    each at most MAX_ARTEFACT_BYTES, all together at most MAX_UNPACKED_BYTES and MAX_RATIO times
    the archive's size (a 419-byte archive of a 4 GiB sparse file, or zeros packed 1000:1, is
    refused before a byte is written); with tarfile's "data" filter (no owner, no setuid bits)."""
    total = 0
    members = []
    for member in tar:
        members.append(member)
        if len(members) > MAX_MEMBERS:
            raise tarfile.TarError(f"more than {MAX_MEMBERS} members")
        target = (dest / member.name).resolve()
        if dest.resolve() not in target.parents and target != dest.resolve():
            raise tarfile.TarError(f"member {member.name!r} would land outside the bundle")
        if not (member.isfile() or member.isdir()):
            raise tarfile.TarError(f"member {member.name!r} is not a plain file")
        if member.issparse():
            raise tarfile.TarError(f"member {member.name!r} is a sparse file")
        total = _counted(member, total, archive_bytes)
    if hasattr(tarfile, "data_filter"):
        tar.extractall(dest, members=members, filter="data")
        return
    for member in members:  # Pythons without extraction filters: the same, by hand
        member.mode = 0o700 if member.isdir() else 0o600
        member.uid = member.gid = os.geteuid()
        member.uname = member.gname = ""
    tar.extractall(dest, members=members)  # noqa: S202 - members checked above


def _opt(value: Any, kind: type) -> Any:
    """`value` if it is None or of `kind` (bool is no int here); TypeError otherwise."""
    if value is None or (isinstance(value, kind) and not isinstance(value, bool)):
        return value
    raise TypeError(f"expected {kind.__name__} or null, got {type(value).__name__}")


def _claim_root(root: Path) -> int:
    """A descriptor of `root` as the bundle's directory: created 0700 (missing parents too,
    whatever the umask), or an existing *empty* directory of the caller's that no one else may
    write (left as it is: the doctor never chmods what it did not create). Refused: a non-empty
    directory (`--bundle /tmp` or `--bundle .` would pack what is already there into the tarball),
    another user's or a shared one (they could swap what it holds), a symbolic link, and any
    path through a directory of another user or one others may write (sticky ones excepted).
    Raises UnsafePath / OSError."""
    if os.path.lexists(root) and (root.is_symlink() or not root.is_dir()):
        raise OSError(errno.ENOTDIR, "it exists and is not a directory")
    fd, created = open_dir(
        root, create=True, leaf_mode=0o700, parents_mode=0o700, follow_leaf=False
    )
    try:
        if not created:
            if os.listdir(fd):
                raise OSError(
                    errno.ENOTEMPTY,
                    "it exists and is not empty (give a new directory: the bundle and "
                    "DIR.tar.gz must hold only the evidence)",
                )
            why = private_problem(os.fstat(fd))
            if why is not None:
                raise UnsafePath(f"refusing {root}: {why} (give a new directory)")
        os.mkdir("raw", 0o700, dir_fd=fd)
        probe = ".write-test"
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o600, dir_fd=fd))
        os.unlink(probe, dir_fd=fd)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _with(record: ProbeRecord, **changes: Any) -> ProbeRecord:
    d = {**record.__dict__, **changes}
    return ProbeRecord(**d)


def _join(a: str | None, b: str) -> str:
    return f"{a}; {b}" if a else b


def dumps_json(obj: Any) -> str:
    """JSON for artefacts we compose ourselves (processes, NVML series)."""
    buf = io.StringIO()
    json.dump(obj, buf, default=str)
    return buf.getvalue()
