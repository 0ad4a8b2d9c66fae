"""The evidence bundle: verbatim artefacts, a manifest with one outcome per probe, private files."""

from __future__ import annotations

import json
import stat
import tarfile
from pathlib import Path
from typing import Any

import pytest

from slime_hangdoctor import bundle as bundle_format
from slime_hangdoctor.bundle import BundleWriter, ProbeRecord, archive, open_bundle
from slime_hangdoctor.errors import BundleInvalid, BundleNotWritable
from slime_hangdoctor.outcome import Outcome
from slime_hangdoctor.parsers.nvml import NVML
from slime_hangdoctor.parsers.pyspy import PYSPY
from slime_hangdoctor.parsers.sglang import SGLANG


def _write(root: Path) -> BundleWriter:
    w = BundleWriter(root, command="test", window_s=3.0, known_secrets=("s3cr3t-key",))
    w.note_sample(0, 100.0)
    w.note_sample(1, 103.0)
    w.add(
        ProbeRecord(
            PYSPY, "pid_1", Outcome.OK, node_ip="10.0.0.1", sample=0, meta={"pid": 1}
        ),
        b"[]",
        suffix=".json",
    )
    w.add(
        ProbeRecord(SGLANG, "h_15000_/server_info", Outcome.OK, sample=1),
        '{"api_key": "s3cr3t-key", "x": 1}',
        suffix=".json",
    )
    w.add(
        ProbeRecord(
            NVML, "gpus", Outcome.UNAVAILABLE, "NVML Shared Library Not Found"
        )
    )
    w.add(
        ProbeRecord(bundle_format.FLIGHT_RECORDER, "rank0", Outcome.OK),
        b"\x80\x04binary s3cr3t-key",
        suffix=".pkl",
    )
    w.finish()
    return w


def test_round_trip_keeps_bytes_and_outcomes(tmp_path: Path) -> None:
    """A bundle re-opens with every record, its outcome and its bytes (binary kept verbatim)."""
    _write(tmp_path / "bnd")
    with open_bundle(tmp_path / "bnd") as opened:
        recs = list(opened.records())
        assert [r.outcome for r in recs] == [
            Outcome.OK,
            Outcome.OK,
            Outcome.UNAVAILABLE,
            Outcome.OK,
        ]
        assert opened.read(recs[0]) == b"[]"
        assert opened.read(recs[2]) is None
        assert opened.read(recs[3]) == b"\x80\x04binary s3cr3t-key"  # pickles are never rewritten
        assert opened.manifest.sample_times == (100.0, 103.0)
        assert opened.manifest.hosts == ("10.0.0.1",)


def test_text_artefacts_and_manifest_are_redacted(tmp_path: Path) -> None:
    """API keys never reach a bundle's text artefacts."""
    _write(tmp_path / "bnd")
    body = next((tmp_path / "bnd" / "raw" / "sglang").rglob("*.json")).read_text()
    assert "s3cr3t-key" not in body and "<redacted>" in body
    assert "s3cr3t-key" not in (tmp_path / "bnd" / "manifest.json").read_text()


def test_files_are_private(tmp_path: Path) -> None:
    """Bundles hold stacks and command lines: directories 0700, files 0600."""
    w = _write(tmp_path / "bnd")
    assert stat.S_IMODE(w.root.stat().st_mode) == 0o700
    for p in w.root.rglob("*"):
        want = 0o700 if p.is_dir() else 0o600
        assert stat.S_IMODE(p.stat().st_mode) == want, p


def test_archive_opens_like_the_directory(tmp_path: Path) -> None:
    """The .tar.gz of a bundle is itself a readable bundle."""
    w = _write(tmp_path / "bnd")
    tar = archive(w.root)
    assert stat.S_IMODE(tar.stat().st_mode) == 0o600
    with open_bundle(tar) as opened:
        assert len(opened.manifest.probes) == 4


@pytest.mark.parametrize(
    "breakage",
    ["missing", "not_json", "wrong_schema", "probes_not_list", "bad_outcome"],
)
def test_corrupt_bundles_raise_bundle_invalid(tmp_path: Path, breakage: str) -> None:
    """A corrupt bundle gives a clear BundleInvalid, never a traceback."""
    w = _write(tmp_path / "bnd")
    manifest = w.root / "manifest.json"
    data = json.loads(manifest.read_text())
    if breakage == "missing":
        manifest.unlink()
    elif breakage == "not_json":
        manifest.write_text("{not json")
    elif breakage == "wrong_schema":
        manifest.write_text(json.dumps({**data, "schema": "other/1"}))
    elif breakage == "probes_not_list":
        manifest.write_text(json.dumps({**data, "probes": {}}))
    else:
        data["probes"][0]["outcome"] = "exploded"
        manifest.write_text(json.dumps(data))
    with pytest.raises(BundleInvalid):
        open_bundle(w.root)


def test_archive_with_path_escape_is_refused(tmp_path: Path) -> None:
    """A hostile archive cannot write outside its temp directory."""
    evil = tmp_path / "evil.tar.gz"
    payload = tmp_path / "payload"
    payload.write_text("x")
    with tarfile.open(evil, "w:gz") as tar:
        tar.add(payload, arcname="../escaped")
    with pytest.raises(BundleInvalid):
        open_bundle(evil)
    assert not (tmp_path.parent / "escaped").exists()


def test_garbage_archive_is_bundle_invalid(tmp_path: Path) -> None:
    """Random bytes given to analyse are reported, not crashed on."""
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"\x00\x01garbage" * 50)
    with pytest.raises(BundleInvalid):
        open_bundle(junk)


def test_unwritable_destination_is_reported(tmp_path: Path) -> None:
    """An unwritable --bundle gives BundleNotWritable with the path."""
    ro = tmp_path / "ro"
    ro.mkdir()
    (ro / "file").write_text("")
    with pytest.raises(BundleNotWritable):
        BundleWriter(ro / "file" / "bundle", command="test")


def test_read_refuses_paths_outside_the_bundle(tmp_path: Path) -> None:
    """A manifest cannot point the reader at files outside the bundle."""
    w = _write(tmp_path / "bnd")
    (tmp_path / "secret.txt").write_text("outside")
    data = json.loads((w.root / "manifest.json").read_text())
    data["probes"][0]["artifact"] = "../secret.txt"
    (w.root / "manifest.json").write_text(json.dumps(data))
    with open_bundle(w.root) as opened:
        assert opened.read(opened.manifest.probes[0]) is None


# ---------------------------------------------------------------- issue 15: untrusted input


def test_record_names_from_remote_tasks_never_leave_raw(tmp_path: Path) -> None:
    """Point 14: a record that a remote node task sends back names its source, node and target;
    every part of its artefact's path is made safe (no `..`, no `/`), secrets in a target
    blanked."""
    from slime_hangdoctor.bundle import BundleWriter, ProbeRecord
    from slime_hangdoctor.outcome import Outcome

    w = BundleWriter(tmp_path / "b", command="t", known_secrets=("hunter2pw",))
    for source, node, target in (
        ("../../../etc", "..", "cron.d"),
        ("..", "/abs", "../x"),
        ("pyspy", ".", "http://u:hunter2pw@h:1/x"),
    ):
        rec = w.add(ProbeRecord(source, target, Outcome.OK, node_ip=node), "data")
        assert rec.artifact is not None
        path = (w.root / rec.artifact).resolve()
        assert (w.root / "raw").resolve() in path.parents, rec.artifact
        assert "hunter2pw" not in rec.artifact
    assert not (tmp_path / "etc").exists()


def _archive(tmp_path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    import io

    path = tmp_path / "evil.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _manifest_member(name: str = "b/manifest.json") -> tuple[tarfile.TarInfo, bytes]:
    data = json.dumps({"schema": "slime-hangdoctor.bundle/1", "probes": []}).encode()
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def test_zeros_packed_a_thousand_to_one_are_refused_before_unpacking(tmp_path: Path) -> None:
    """Point 12: a member of zeros (about 1000:1 in gzip) made `analyse` fill /tmp; refused from
    the headers, nothing unpacked."""
    import io

    from slime_hangdoctor.bundle import open_bundle
    from slime_hangdoctor.errors import BundleInvalid

    size = 200 * 1024 * 1024
    path = tmp_path / "zeros.tar.gz"

    class Zeros(io.RawIOBase):
        def __init__(self) -> None:
            self.left = size

        def readable(self) -> bool:
            return True

        def readinto(self, b: Any) -> int:
            n = min(len(b), self.left)
            b[:n] = bytes(n)
            self.left -= n
            return n

    with tarfile.open(path, "w:gz", compresslevel=1) as tar:
        info, data = _manifest_member()
        tar.addfile(info, io.BytesIO(data))
        zeros = tarfile.TarInfo("b/raw/nvml/x/gpus.json")
        zeros.size = size
        tar.addfile(zeros, io.BufferedReader(Zeros()))
    assert path.stat().st_size < size // 100
    with pytest.raises(BundleInvalid, match="times its own size"):
        open_bundle(path)


def test_sparse_member_is_refused(tmp_path: Path) -> None:
    """Point 12: GNU tar -S packs a 4 GiB sparse file in a few hundred bytes."""
    import shutil
    import subprocess

    from slime_hangdoctor.bundle import open_bundle
    from slime_hangdoctor.errors import BundleInvalid

    if shutil.which("tar") is None:
        pytest.skip("needs GNU tar")
    src = tmp_path / "b"
    (src / "raw").mkdir(parents=True)
    (src / "manifest.json").write_text('{"schema": "slime-hangdoctor.bundle/1", "probes": []}')
    with open(src / "raw" / "big", "wb") as fh:
        fh.truncate(4 * 1024**3)
    path = tmp_path / "sparse.tar.gz"
    subprocess.run(["tar", "-S", "-czf", str(path), "-C", str(tmp_path), "b"], check=True)
    assert path.stat().st_size < 4096
    with pytest.raises(BundleInvalid, match="sparse|over"):
        open_bundle(path)


def test_extraction_drops_owners_and_setuid_bits(tmp_path: Path) -> None:
    """Point 12: extraction restored uid 0 and setuid bits (tarfile as root); now the "data"
    filter (or the same by hand) drops them."""
    import os
    import stat

    from slime_hangdoctor.bundle import open_bundle

    info = tarfile.TarInfo("b/raw/evil")
    info.size, info.mode, info.uid, info.gid = 2, 0o4777, 4242, 4242
    path = _archive(tmp_path, [_manifest_member(), (info, b"#!")])
    with open_bundle(path) as bundle:
        st = (bundle.root / "raw" / "evil").stat()
        assert not st.st_mode & (stat.S_ISUID | stat.S_ISGID | stat.S_IWOTH)
        assert st.st_uid == os.geteuid()


def test_bundle_read_is_capped(tmp_path: Path) -> None:
    """Point 12: `Bundle.read` of a 4 GiB artefact in a bundle directory read it whole
    (MemoryError); over the cap it is not read (the loader names it a blind spot)."""
    from slime_hangdoctor.bundle import Bundle, Manifest, ProbeRecord
    from slime_hangdoctor.outcome import Outcome

    (tmp_path / "raw").mkdir()
    with open(tmp_path / "raw" / "big", "wb") as fh:
        fh.truncate(4 * 1024**3)
    rec = ProbeRecord("nvml", "gpus", Outcome.OK, artifact="raw/big")
    manifest = Manifest("slime-hangdoctor.bundle/1", "t", 0.0, "t", (), 0.0, (), (rec,))
    assert Bundle(tmp_path, manifest).read(rec) is None


def test_archive_with_long_names_in_every_format_still_opens(tmp_path: Path) -> None:
    """Item 5's header checks keep what tarfile writes: a path over 100 characters takes a pax
    header (the default format) or a GNU long-name header (GNU format); both open."""
    import io

    name = "b/raw/pyspy/" + "n" * 150 + "/pid1.json"
    for fmt in (tarfile.PAX_FORMAT, tarfile.GNU_FORMAT):
        path = tmp_path / f"long{fmt}.tar.gz"
        with tarfile.open(path, "w:gz", format=fmt) as tar:
            info, data = _manifest_member()
            tar.addfile(info, io.BytesIO(data))
            long = tarfile.TarInfo(name)
            long.size = 2
            tar.addfile(long, io.BytesIO(b"{}"))
        with open_bundle(path) as bundle:
            assert (bundle.root.parent / name).read_bytes() == b"{}"


def test_a_chain_of_extended_headers_is_refused(tmp_path: Path) -> None:
    """Item 5: tarfile handles each extended header by recursion and keeps every one read; a
    chain of small ones (each under the size cap) is refused past MAX_HEADER_CHAIN."""
    import gzip

    from slime_hangdoctor.bundle import MAX_HEADER_CHAIN
    from slime_hangdoctor.errors import BundleInvalid

    path = tmp_path / "chain.tar.gz"
    record = b"20 comment=xxxxxxxx\n"
    with gzip.open(path, "wb") as gz:
        for _ in range(MAX_HEADER_CHAIN + 1):
            info = tarfile.TarInfo("./PaxHeaders/x")
            info.type, info.size = tarfile.XHDTYPE, len(record)
            gz.write(info.tobuf(format=tarfile.USTAR_FORMAT))
            gz.write(record.ljust(tarfile.BLOCKSIZE, b"\0"))
        info, data = _manifest_member()
        gz.write(info.tobuf(format=tarfile.USTAR_FORMAT) + data.ljust(tarfile.BLOCKSIZE, b"\0"))
        gz.write(bytes(2 * tarfile.BLOCKSIZE))
    with pytest.raises(BundleInvalid, match="extended headers in a row"):
        open_bundle(path)
