"""Fault injection, bundles: a bundle directory that cannot be written, and corrupt bundles given
to `analyse` (made from the real fixture bundle tests/fixtures/bundles/gpu-2xh200-ray-nccl-hang by
the damage each case names). Each ends with a clear message (exit 3) or a verdict whose blind
spots name the damage; never a traceback.

Cases BU1-BU12 of docs/reliability.md."""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.reliability.harness import (
    COMMON,
    ROOT,
    CliRun,
    assert_clean,
    find_blind,
    rank_running,
    require_alone,
    run_cli,
)

pytestmark = pytest.mark.timeout(120)

FIXTURE = ROOT / "tests" / "fixtures" / "bundles" / "gpu-2xh200-ray-nccl-hang"


def analyse(path: Path, *extra: str) -> CliRun:
    run = run_cli("analyse", str(path), "-f", "json", *extra)
    assert_clean(run)
    return run


def copy_bundle(tmp_path: Path) -> Path:
    dst = tmp_path / FIXTURE.name
    shutil.copytree(FIXTURE, dst)
    return dst


def tarball(root: Path, dest: Path, extra: Callable[[tarfile.TarFile], None] | None = None) -> Path:
    with tarfile.open(dest, "w:gz") as tar:
        tar.add(root, arcname=root.name)
        if extra is not None:
            extra(tar)
    return dest


def _message(run: CliRun) -> str:
    assert run.rc == 3 and not run.stdout.strip(), run.describe()
    return run.err


# --------------------------------------------------------------------------- BU1-BU3 unwritable


def test_collect_into_unwritable_dir(tmp_path: Path) -> None:
    """BU1: --bundle under a regular file (as root, permission bits would not stop us): exit 3 and
    the reason, at once."""
    (tmp_path / "file").write_text("")
    out = tmp_path / "file" / "bundle"
    run = run_cli("collect", "--local", "--bundle", str(out), *COMMON[2:])
    assert_clean(run, rcs=(3,))
    # (the message wraps at the terminal's width, possibly inside the path: compared unwrapped)
    assert f"cannotwriteanevidencebundleat{out}" in "".join(run.err.split())
    assert "Not a directory" in run.err and "Choose a writable --bundle" in run.err


def test_attach_into_unwritable_dir(tmp_path: Path) -> None:
    """BU2: the same for attach --bundle (inside /proc, where nothing can be created)."""
    run = run_cli("attach", "--local", "--bundle", "/proc/hangdoctor-reliability", *COMMON)
    assert_clean(run, rcs=(3,))
    assert "cannot write an evidence bundle at /proc/hangdoctor-reliability" in run.err


@pytest.fixture(scope="module")
def watch_unwritable(tmp_path_factory: pytest.TempPathFactory) -> CliRun:
    """`watch` (2 runs, 1 s apart, stall after 1 s) over a hung stand-in rank, with a --bundle-dir
    under a regular file: the second run finds a new stall and tries to keep its evidence."""
    work = tmp_path_factory.mktemp("watch")
    (work / "file").write_text("")
    with rank_running(work) as rank:
        require_alone(rank.pid)  # another job on the machine could make the verdict progressing
        run = run_cli(
            "watch",
            "--local",
            "--max-runs",
            "2",
            "--interval",
            "1",
            "--stall-after",
            "1",
            "--state-file",
            str(work / "state.json"),
            "--bundle-dir",
            str(work / "file" / "stalls"),
            *COMMON[2:],
        )
    assert_clean(run, bound_s=60.0)
    return run


def test_watch_with_unwritable_bundle_dir_still_alerts(watch_unwritable: CliRun) -> None:
    """BU3: the watchdog's --bundle-dir cannot be created: both runs still report, the second
    one the stall (exit 2)."""
    lines = watch_unwritable.stdout.splitlines()
    assert len(lines) == 2 and "exit=2" in lines[1], lines
    assert watch_unwritable.rc == 2


def test_watch_with_unwritable_bundle_dir_says_so(watch_unwritable: CliRun) -> None:
    """BU3 (message): the run says the stall bundle could not be written, and where."""
    out = watch_unwritable.stdout + watch_unwritable.stderr
    assert "stalls" in out and ("cannot" in out or "not writable" in out), out


# --------------------------------------------------------------------------- BU4-BU9 unreadable


def test_analyse_missing_path(tmp_path: Path) -> None:
    """BU4: no such bundle."""
    err = _message(analyse(tmp_path / "nope"))
    assert "does not exist" in err and "collect --bundle" in err


def test_analyse_truncated_archive(tmp_path: Path) -> None:
    """BU5: a .tar.gz cut in half (an interrupted copy)."""
    whole = tarball(copy_bundle(tmp_path), tmp_path / "b.tar.gz").read_bytes()
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    assert "is not a readable bundle archive" in _message(analyse(cut))


def test_analyse_archive_escaping_its_folder(tmp_path: Path) -> None:
    """BU6: an archive with a member that would land outside the unpack folder (../): refused
    before anything is written."""

    def evil(tar: tarfile.TarFile) -> None:
        data = b"owned\n"
        info = tarfile.TarInfo("../../hangdoctor-escaped.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))

    path = tarball(copy_bundle(tmp_path), tmp_path / "evil.tar.gz", evil)
    err = _message(analyse(path))
    assert "would land outside the bundle" in err
    assert not (tmp_path.parent / "hangdoctor-escaped.txt").exists()


def test_analyse_archive_with_a_symlink(tmp_path: Path) -> None:
    """BU7: an archive with a symlink member (could point anywhere): refused."""

    def link(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo("gpu-2xh200-ray-nccl-hang/raw/passwd")
        info.type = tarfile.SYMTYPE
        info.linkname = "/etc/passwd"
        tar.addfile(info)

    path = tarball(copy_bundle(tmp_path), tmp_path / "link.tar.gz", link)
    assert "is not a plain file" in _message(analyse(path))


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        ("delete", "manifest.json is not readable"),
        ("not-json", "is not readable"),
        ("not-utf8", "is not readable"),
        ("wrong-schema", "unknown schema"),
        ("no-probes", "has no probe list"),
        ("bad-record", "manifest probe record is malformed"),
        ("bad-outcome", "manifest probe record is malformed"),
        ("list", "is not a JSON object"),
    ],
)
def test_analyse_damaged_manifest(tmp_path: Path, damage: str, says: str) -> None:
    """BU8: manifest.json deleted, not JSON, not UTF-8, of another schema, without probes, with a
    record missing its fields or with an unknown outcome, or not an object."""
    root = copy_bundle(tmp_path)
    path = root / "manifest.json"
    doc = json.loads(path.read_text())
    if damage == "delete":
        path.unlink()
    elif damage == "not-json":
        path.write_text(path.read_text()[:500])
    elif damage == "not-utf8":
        path.write_bytes(b"\xff\xfe" + path.read_bytes())
    elif damage == "wrong-schema":
        path.write_text(json.dumps({**doc, "schema": "something-else/9"}))
    elif damage == "no-probes":
        path.write_text(json.dumps({k: v for k, v in doc.items() if k != "probes"}))
    elif damage == "bad-record":
        path.write_text(json.dumps({**doc, "probes": [{"source": "pyspy"}]}))
    elif damage == "bad-outcome":
        probes = [{**p, "outcome": "exploded"} for p in doc["probes"]]
        path.write_text(json.dumps({**doc, "probes": probes}))
    elif damage == "list":
        path.write_text(json.dumps([doc]))
    assert says in _message(analyse(root))


def test_analyse_garbage_artefacts(tmp_path: Path) -> None:
    """BU9: every raw artefact overwritten with garbage: a verdict (exit 3, could not tell) whose
    blind spots name each unreadable artefact."""
    root = copy_bundle(tmp_path)
    for f in (root / "raw").rglob("*"):
        if f.is_file():
            f.write_bytes(b"\x00\xff garbage {{{ \xfe")
    run = analyse(root)
    assert run.rc == 3
    for source in ("ray_dashboard /api/v0/actors", "processes", "pyspy", "nvml", "nccl_ras"):
        find_blind(run, source, "could not parse")


def test_analyse_missing_artefacts(tmp_path: Path) -> None:
    """BU10: raw/ deleted (a manifest copied alone): each missing artefact is a blind spot."""
    root = copy_bundle(tmp_path)
    shutil.rmtree(root / "raw")
    run = analyse(root)
    find_blind(run, "ray_dashboard /api/v0/actors", "artefact missing from the bundle")
    find_blind(run, "nvml", "artefact missing from the bundle")


def test_analyse_artefact_path_outside_bundle(tmp_path: Path) -> None:
    """BU11: manifest records pointing outside the bundle (../../..): never read."""
    root = copy_bundle(tmp_path)
    secret = tmp_path / "outside.json"
    secret.write_text('{"result": true, "msg": "", "data": {"result": {"result": []}}}')
    doc = json.loads((root / "manifest.json").read_text())
    for p in doc["probes"]:
        if p.get("artifact"):
            p["artifact"] = "../outside.json"
    (root / "manifest.json").write_text(json.dumps(doc))
    run = analyse(root)
    find_blind(run, "ray_dashboard /api/v0/actors", "artefact missing from the bundle")


def test_analyse_empty_directory(tmp_path: Path) -> None:
    """BU12: an empty directory is not a bundle."""
    (tmp_path / "empty").mkdir()
    assert "is not readable" in _message(analyse(tmp_path / "empty"))
