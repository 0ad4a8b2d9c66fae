"""Issue 22 (security, round 2), the file-system and address points: each test is the attack as
an unprivileged local user (uid 65534) or a hostile Ray node would make it, against the public
function or the real CLI, and asserts that it fails and that the doctor still works.

- SP1-SP2 (point 1): a remote node's answer whose artefact suffix climbs out of the bundle, and a
  folder of the bundle swapped for a symlink: nothing lands outside, the record is kept.
- SP3-SP6 (point 3): a GCS address planted in the Ray temp dir (Ray makes it 0777, no sticky
  bit): the Ray token never reaches the planted listener; the `--local` uid is not taken from it.
- SP7-SP11 (point 7): `--bundle` onto another user's or a shared directory, through another user's
  symlink, beside a planted `DIR.tar.gz`; stall bundle names nobody can predict.
- SP12-SP13 (point 9): the default state directory created first by another user; parents made
  0777 under umask 0.
- SP14 (point 10): a FIFO artefact or manifest in a bundle directory given to `analyse`.
- SP15-SP16 (point 12): `--log-file` through a planted symlink, into a FIFO, under umask 0.
- SP17-SP19 (issue 32): `--prom-file` through planted links, temp names, under umask 0.
- SP20-SP21 (issue 41, M1): `-o/--output` through a symlink planted at the path, into a FIFO.

The foreign-owner cases need root to hand a path to uid 65534 (the suite runs as root in CI)."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import tarfile
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from slime_hangdoctor.bundle import BundleWriter, open_bundle
from slime_hangdoctor.collect.node import export_records
from slime_hangdoctor.collect.processes import local_uid, record_processes
from slime_hangdoctor.collect.remote import SAMPLE_SOURCES, Asked, RemoteNode, add_exported
from slime_hangdoctor.errors import RayUnreachable
from slime_hangdoctor.load import load_snapshot
from slime_hangdoctor.parsers.processes import SPEC as PROCESSES
from tests.reliability.harness import ROOT, CliRun, assert_clean, cli_env, http_stub, run_cli

pytestmark = pytest.mark.timeout(120)

NOBODY = 65534
VICTIM_TEXT = b"root:x:0:0:precious\n"
CHECK = ("check", "--local", "--window", "0.2", "--timeout", "8", "--json")
ATTACH = ("attach", "--local", "--window", "0.2", "--timeout", "8", "-f", "json")
FIXTURE = ROOT / "tests" / "fixtures" / "bundles" / "gpu-2xh200-ray-nccl-hang"


def _says(run: CliRun, text: str) -> bool:
    return "".join(text.split()) in "".join(run.stderr.split())


def _root_only() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to hand a path to another user")


ROUTER_FORK = (
    Path(__file__).resolve().parents[1] / "fixtures" / "real" / "router-fork" / "router_fork.tar.gz"
)


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "victim"
    victim.write_bytes(VICTIM_TEXT)
    return victim


def _outside(tmp_path: Path, bundle: Path) -> list[Path]:
    """Every file under tmp_path that is not inside the bundle directory."""
    return [
        p
        for p in tmp_path.rglob("*")
        if p.is_file() and bundle not in p.parents and p.name != "victim"
    ]


# ------------------------------------------------------------------ SP1-SP2 a hostile node (point 1)


# the node that answers: the one the records name (collect/remote.py files them under it)
NODE2 = Asked(RemoteNode("n2", "10.0.0.2"), 0, SAMPLE_SOURCES)


def _node_answer(tmp_path: Path) -> list[tuple[dict[str, Any], bytes | None, str]]:
    """What a node task returns: the export of a real process scan of this machine."""
    node = BundleWriter(tmp_path / "node-sample", command="node-sample")
    record_processes(node, node_ip="10.0.0.2", sample=0)
    exported = export_records(node)
    assert len(exported) == 1 and exported[0][1], exported
    return exported


def test_a_node_suffix_never_writes_outside_the_bundle(tmp_path: Path) -> None:
    """SP1: the suffix `/../../(...)/<tmp>/cron.d/x` (the issue's `/etc/cron.d/x`, aimed at a
    temp dir) through the real add_exported and BundleWriter: nothing outside the bundle, the
    record kept under raw/ with a safe name that says what happened; the bundle analyses."""
    cron = tmp_path / "cron.d"
    cron.mkdir()
    rec, data, _ = _node_answer(tmp_path)[0]
    hostile = "/" + "../" * 40 + str(cron / "x").lstrip("/")
    out = tmp_path / "b"
    writer = BundleWriter(out, command="attach")
    assert add_exported(writer, [(rec, data, hostile)], NODE2) == 1
    writer.finish()
    assert list(cron.iterdir()) == [], "a node's suffix wrote outside the bundle"
    assert all("node-sample" in p.parts for p in _outside(tmp_path, out)), _outside(tmp_path, out)
    (stored,) = [p for p in writer.records if p.node_ip == "10.0.0.2"]
    assert stored.artifact is not None and stored.artifact.startswith("raw/processes/10.0.0.2/")
    assert "/.." not in stored.artifact and (out / stored.artifact).read_bytes() == data
    assert "was unsafe" in str(stored.reason)
    with open_bundle(out) as opened:
        snap = load_snapshot(opened)
    assert any(p.node_ip == "10.0.0.2" for p in snap.facts(PROCESSES)), "the record was not kept"
    run = run_cli("analyse", str(out), "-f", "json")
    assert_clean(run)
    assert run.verdict()["status"], run.describe()


def test_a_node_suffix_of_pkl_does_not_skip_redaction(tmp_path: Path) -> None:
    """SP1b: flight-recorder pickles are kept byte for byte; a node answer that claims `.pkl` for
    another source's artefact (the real process scan of this machine, with a secret in a command
    line) is redacted all the same: the suffix comes from the node, the source decides."""
    rec, data, _ = _node_answer(tmp_path)[0]
    assert data is not None
    secret = "hd-sp1b-" + "q" * 24
    doc = json.loads(data)
    # a process entry as a real scan records it (the router-fork recording's driver), with a
    # secret on its command line: the node's own bytes, whatever it claims they are
    with tarfile.open(ROUTER_FORK) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("processes.s0.json"))
        handle = tar.extractfile(member)
        assert handle is not None
        recorded = json.loads(handle.read())["processes"]
    driver = dict(next(p for p in recorded if "job.py" in " ".join(p["cmdline"])))
    driver["cmdline"] = [*driver["cmdline"], f"--api-key={secret}"]
    doc["processes"] = [driver]
    planted = json.dumps(doc).encode()
    out = tmp_path / "b"
    writer = BundleWriter(out, command="attach")
    assert add_exported(writer, [(rec, planted, ".pkl")], NODE2) == 1
    writer.finish()
    (stored,) = [p for p in writer.records if p.node_ip == "10.0.0.2"]
    assert stored.artifact is not None
    kept = (out / stored.artifact).read_bytes()
    assert secret.encode() not in kept and b"--api-key" in kept


def test_a_swapped_bundle_folder_is_never_written_through(tmp_path: Path) -> None:
    """SP2: `raw/processes` swapped for a symlink to a folder outside after the writer made the
    bundle: the node's record is written through no link (each folder O_NOFOLLOW under the one
    before); it is kept as a blind spot ("artefact not saved"), the rest of the bundle reads."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    answer = _node_answer(tmp_path)
    out = tmp_path / "b"
    writer = BundleWriter(out, command="attach")
    (out / "raw" / "processes").symlink_to(elsewhere)
    add_exported(writer, answer, NODE2)
    writer.finish()
    assert list(elsewhere.rglob("*")) == [], "written through a symlinked folder"
    (stored,) = writer.records
    assert stored.artifact is None and "artefact not saved" in str(stored.reason)
    run = run_cli("analyse", str(out), "-f", "json")
    assert_clean(run)
    assert any("artefact" in b or "processes" in b for b in run.blind_spots()), run.describe()


# ------------------------------------------------------------- SP3-SP6 planted addresses (point 3)

TOKEN = "SECRET-planted-gcs-token-5c1e"


@dataclass
class FakeGcs:
    """A gRPC server answering Ray's InternalKVGet (the dashboard's address) as a planted GCS
    would: it names the attacker's HTTP listener; every call's metadata is recorded."""

    port: int
    dashboard: str
    calls: list[dict[str, str]] = field(default_factory=list)


@contextmanager
def fake_gcs(dashboard: str) -> Iterator[FakeGcs]:
    import grpc
    from ray.core.generated import gcs_service_pb2 as pb2

    fake = FakeGcs(0, dashboard)

    def kv_get(request: Any, context: Any) -> Any:
        fake.calls.append(dict(context.invocation_metadata()))
        return pb2.InternalKVGetReply(value=fake.dashboard.encode())

    handler = grpc.method_handlers_generic_handler(
        "ray.rpc.InternalKVGcsService",
        {
            "InternalKVGet": grpc.unary_unary_rpc_method_handler(
                kv_get,
                request_deserializer=pb2.InternalKVGetRequest.FromString,
                response_serializer=pb2.InternalKVGetReply.SerializeToString,
            )
        },
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((handler,))
    fake.port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield fake
    finally:
        server.stop(0)


def _plant_ray_dir(
    tmp_path: Path, gcs_port: int, *, owner: int | None, mode: int, via: str
) -> Path:
    """A Ray temp dir `<tmp>/ray` (mode `mode`) naming the planted GCS, in `ray_current_cluster`
    or in a session's `gcs_server_port_*` file, the files owned by `owner` (None: ours)."""
    ray = tmp_path / "ray"
    ray.mkdir()
    ray.chmod(mode)
    if via == "current":
        planted = ray / "ray_current_cluster"
        planted.write_text(f"127.0.0.1:{gcs_port}")
        files = [planted]
    else:
        session = ray / "session_2026-12-01_00-00-00_000000_1"
        session.mkdir()
        session.chmod(mode)
        planted = session / "gcs_server_port_abc"
        planted.write_text(str(gcs_port))
        (ray / "session_latest").symlink_to(session)
        files = [session, planted, ray / "session_latest"]
    if owner is not None:
        for f in files:
            os.lchown(f, owner, owner)
    return ray


def _token_seen(gcs: FakeGcs, stub: Any) -> bool:
    by_grpc = any(TOKEN in v for call in gcs.calls for v in call.values())
    by_http = any(TOKEN in " ".join(h.values()) for _, _, h in stub.seen)
    return by_grpc or by_http


def _resolve(ray: Path) -> tuple[str, tuple[str, ...]]:
    from slime_hangdoctor.collect.address import resolve_cluster

    try:
        cluster = resolve_cluster(None, timeout=4, token=TOKEN, ray_temp_dir=ray)
    except RayUnreachable as exc:
        return str(exc), ()
    return cluster.dashboard_url, cluster.distrusted


@pytest.mark.parametrize("via", ["current", "session"])
@pytest.mark.parametrize(
    ("owner", "mode"),
    [(NOBODY, 0o755), (None, 0o777)],
    ids=["file-of-another-user", "ray-made-0777-dir"],
)
def test_the_ray_token_never_reaches_a_planted_gcs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, owner: int | None, mode: int, via: str
) -> None:
    """SP3: the GCS address planted as `ray_current_cluster` or a session's port file, either
    by another user or in a directory every user may write (as Ray makes /tmp/ray): a real gRPC
    listener and the HTTP 'dashboard' it names get no call carrying the token; the run names the
    file and why it was not trusted."""
    if owner is not None:
        _root_only()
    for var in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS"):
        monkeypatch.delenv(var, raising=False)
    with http_stub({}) as stub, fake_gcs("") as gcs:
        gcs.dashboard = stub.url.removeprefix("http://")
        ray = _plant_ray_dir(tmp_path, gcs.port, owner=owner, mode=mode, via=via)
        found, distrusted = _resolve(ray)
        assert not _token_seen(gcs, stub), f"the token reached the planted listener: {gcs.calls}"
        assert gcs.calls == [] and stub.seen == []
    said = found + " ".join(distrusted)
    assert "not trusted" in said, said
    assert ("uid 65534" if owner else "others may write to it (mode 0777") in said


def test_a_trusted_local_cluster_file_is_still_used_with_the_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SP4, the control of SP3: the same files in a directory of ours that no one else may write
    are trusted: the token goes to the GCS they name (so SP3's listener would have seen it)."""
    for var in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS"):
        monkeypatch.delenv(var, raising=False)
    with http_stub({}) as stub, fake_gcs("") as gcs:
        gcs.dashboard = stub.url.removeprefix("http://")
        ray = _plant_ray_dir(tmp_path, gcs.port, owner=None, mode=0o755, via="current")
        _resolve(ray)
        assert _token_seen(gcs, stub)


def test_a_trusted_but_stale_local_cluster_file_gets_no_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 43 item 7, beside SP4: the same trusted `ray_current_cluster` (ours, in a directory
    of ours no one else may write), left behind by a cluster older than the latest session
    (`session_latest` linked an hour after the file was written, as a `ray start` since does):
    its GCS gets no call carrying the token, and the run says the file is stale."""
    for var in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS"):
        monkeypatch.delenv(var, raising=False)
    with http_stub({}) as stub, fake_gcs("") as gcs:
        gcs.dashboard = stub.url.removeprefix("http://")
        ray = _plant_ray_dir(tmp_path, gcs.port, owner=None, mode=0o755, via="current")
        current = ray / "ray_current_cluster"
        session = ray / "session_2026-12-07_00-00-00_000000_2"
        session.mkdir()
        (ray / "session_latest").symlink_to(session)
        started = os.lstat(ray / "session_latest").st_mtime
        os.utime(current, (started - 3600, started - 3600))
        found, distrusted = _resolve(ray)
        assert not _token_seen(gcs, stub), f"the token reached a stale cluster's GCS: {gcs.calls}"
    said = found + " ".join(distrusted)
    assert "stale: older than the latest session" in said, said


def test_a_trusted_local_cluster_file_naming_a_port_nobody_holds_gets_no_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 43 item 7: a trusted `ray_current_cluster` whose GCS port on this machine no process
    listens on (the cluster is gone; anyone may bind the port next) is stale, said so."""
    for var in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS"):
        monkeypatch.delenv(var, raising=False)
    import socket

    with socket.socket() as sock:  # a port just freed: nothing listens on it
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ray = _plant_ray_dir(tmp_path, port, owner=None, mode=0o755, via="current")
    found, distrusted = _resolve(ray)
    said = found + " ".join(distrusted)
    assert f"stale: nothing listens on 127.0.0.1:{port}" in said, said


def test_cron_check_sends_no_token_to_a_planted_address(tmp_path: Path) -> None:
    """SP5: the cron path itself, `check` with no address and a token in the environment, the
    Ray temp dir planted by another user: no call reaches the planted GCS; the run ends with a
    clear verdict naming the file, never a traceback."""
    _root_only()
    with http_stub({}) as stub, fake_gcs("") as gcs:
        gcs.dashboard = stub.url.removeprefix("http://")
        _plant_ray_dir(tmp_path, gcs.port, owner=NOBODY, mode=0o777, via="current")
        env = cli_env(extra={"RAY_TMPDIR": str(tmp_path), "RAY_AUTH_TOKEN": TOKEN})
        run = run_cli(
            "check",
            "--window",
            "0.2",
            "--timeout",
            "8",
            "--json",
            "--state-file",
            str(tmp_path / "hd" / "state.json"),
            env=env,
        )
        assert_clean(run, bound_s=30.0)
        assert gcs.calls == [] and not _token_seen(gcs, stub), run.describe()
    text = run.stdout + run.stderr
    assert "ray_current_cluster" in text and "not trusted" in text, run.describe()
    assert TOKEN not in text


def test_local_uid_is_not_taken_from_a_planted_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SP6: `session_latest` planted by uid 65534 in a Ray temp dir every user may write: the
    default `--local` user is not 65534 (a root doctor would py-spy that user's processes); the
    scan says why (a partial blind spot). `--uid` still names any user."""
    _root_only()
    ray = tmp_path / "ray"
    ray.mkdir()
    ray.chmod(0o777)
    session = ray / "session_planted"
    session.mkdir()
    (ray / "session_latest").symlink_to(session)
    for p in (session, ray / "session_latest"):
        os.lchown(p, NOBODY, NOBODY)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    assert local_uid(None) == os.geteuid()
    assert local_uid(NOBODY) == NOBODY
    writer = BundleWriter(tmp_path / "b", command="attach")
    from slime_hangdoctor.collect.node import sample_node
    from slime_hangdoctor.collect.node_probe import NodeSpec
    from slime_hangdoctor.collect.options import CollectOptions, Deadline

    opts = CollectOptions(local=True, stacks=False)
    spec = NodeSpec(node_ip=None, sample=0, off=frozenset({"pyspy", "nccl_ras", "actor_log_head"}))
    with futures.ThreadPoolExecutor(max_workers=2) as pool:
        sample_node(writer, spec, opts, Deadline(5.0), pool)
    (scan,) = [r for r in writer.records if r.source == "processes"]
    assert scan.meta.get("uid") == os.geteuid()
    assert "was not taken" in str(scan.reason) and "others may write" in str(scan.reason)


# ------------------------------------------------------------------ SP7-SP11 --bundle (point 7)


def test_out_onto_another_users_empty_directory_is_refused(tmp_path: Path) -> None:
    """SP7: an empty directory made ahead by uid 65534 (who could then swap what it holds, or
    read the bundle): refused with the owner named; nothing written in it."""
    _root_only()
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, NOBODY, NOBODY)
    run = run_cli(*ATTACH, "--bundle", str(theirs))
    assert_clean(run, bound_s=30.0)
    assert run.rc == 3 and _says(run, f"belongs to uid {NOBODY}"), run.describe()
    assert list(theirs.iterdir()) == [] and not (tmp_path / "theirs.tar.gz").exists()


def test_out_onto_a_directory_everyone_may_write_is_refused(tmp_path: Path) -> None:
    """SP8: an empty directory of mode 0777 (ours, but anyone may plant in it): refused."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    run = run_cli(*ATTACH, "--bundle", str(shared))
    assert_clean(run, bound_s=30.0)
    assert run.rc == 3 and _says(run, "others may write to it (mode 0777)"), run.describe()
    assert list(shared.iterdir()) == []


def test_out_through_another_users_symlink_is_refused(tmp_path: Path) -> None:
    """SP9: `--bundle /tmp-like/link/bundle` where `link` is uid 65534's symlink in a sticky
    directory, pointing at a directory they chose: the middle link is not followed."""
    _root_only()
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    aimed = tmp_path / "aimed"
    aimed.mkdir()
    link = sticky / "link"
    link.symlink_to(aimed)
    os.lchown(link, NOBODY, NOBODY)
    run = run_cli(*ATTACH, "--bundle", str(link / "bundle"))
    assert_clean(run, bound_s=30.0)
    assert run.rc == 3 and _says(run, f"is a symbolic link of uid {NOBODY}"), run.describe()
    assert list(aimed.iterdir()) == []


def test_a_planted_tarball_is_never_filled(tmp_path: Path) -> None:
    """SP10: `DIR.tar.gz` made ahead by uid 65534, mode 0666, in a sticky shared directory: the
    root run neither truncates nor fills it (it would stay theirs, world-readable, holding the
    evidence); it says so, exit 3, and the bundle directory is still there, private."""
    _root_only()
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    planted = sticky / "b.tar.gz"
    planted.write_bytes(b"planted")
    planted.chmod(0o666)
    os.chown(planted, NOBODY, NOBODY)
    run = run_cli(*ATTACH, "--bundle", str(sticky / "b"))
    assert_clean(run, bound_s=30.0)
    assert planted.read_bytes() == b"planted", "the planted tarball was filled"
    assert run.rc == 3 and _says(run, f"belongs to uid {NOBODY}"), run.describe()
    assert (sticky / "b" / "manifest.json").is_file()
    assert stat.S_IMODE((sticky / "b").stat().st_mode) == 0o700


def test_stall_bundle_names_cannot_be_predicted(tmp_path: Path) -> None:
    """SP11: two stall bundles of the same second get different names with a random tail, so
    nobody can plant the next one's directory or tarball ahead of it."""
    from slime_hangdoctor.collect.options import CollectOptions
    from slime_hangdoctor.watchdog import run as watchdog

    stalls = tmp_path / "stalls"
    check = watchdog.CheckOptions(state_file=tmp_path / "hd" / "state.json", bundle_dir=stalls)
    opts = CollectOptions(local=True, window_s=0.2, timeout_s=8.0, stacks=False)
    made = [watchdog._keep_evidence(None, opts, check, now=1_800_000_000.0) for _ in range(2)]
    assert [problem for _, problem in made] == [None, None], made
    names = sorted(p.name for p in stalls.iterdir() if p.is_dir())
    assert len(names) == 2, names
    for name in names:
        assert re.fullmatch(r"stall-20270115T080000-[0-9a-f]{12}", name), name
    assert stat.S_IMODE(stalls.stat().st_mode) == 0o700


# ------------------------------------------------------------- SP12-SP13 state dir (point 9)


def test_a_foreign_default_state_directory_does_not_stop_the_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SP12: the default state directory made first by uid 65534: the run is not denied (it was
    exit 3 on every run); it says why and keeps its state in the caller's own state directory,
    made 0700. (The default path is pointed at a temp dir: the real /var/tmp is shared here.)"""
    _root_only()
    from slime_hangdoctor.collect.options import CollectOptions
    from slime_hangdoctor.watchdog import run as watchdog

    planted = tmp_path / "var-tmp" / "slime-hangdoctor"
    planted.mkdir(parents=True)
    os.chown(planted, NOBODY, NOBODY)
    default = planted / "state.json"
    monkeypatch.setattr(watchdog, "DEFAULT_STATE_FILE", default)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    opts = CollectOptions(local=True, window_s=0.2, timeout_s=8.0, stacks=False)
    result = watchdog.run_check(None, opts, watchdog.CheckOptions(state_file=default))
    notes = " ".join(result.notes)
    assert f"belongs to uid {NOBODY}" in notes and "kept in" in notes, notes
    own = tmp_path / "xdg" / "slime-hangdoctor"
    assert (own / "state.json").is_file() and stat.S_IMODE(own.stat().st_mode) == 0o700
    assert list(planted.iterdir()) == []
    findings = " ".join(f.message for f in result.diagnosis.verdict.findings)
    assert "kept in" in findings


def test_state_parents_are_not_made_world_writable_under_umask_0(tmp_path: Path) -> None:
    """SP13: `--state-file a/b/hd/state.json` with a, b missing, under umask 000: the parents
    are made 0755 (were 0777: anyone could then swap the state directory), the directory 0700."""
    state = tmp_path / "a" / "b" / "hd" / "state.json"
    run = run_cli(*CHECK, "--state-file", str(state), umask=0)
    assert_clean(run, bound_s=30.0)
    for parent in (tmp_path / "a", tmp_path / "a" / "b"):
        assert stat.S_IMODE(parent.stat().st_mode) == 0o755, parent
    assert stat.S_IMODE(state.parent.stat().st_mode) == 0o700


# ---------------------------------------------------------------- SP14 FIFO artefacts (point 10)


@pytest.mark.parametrize("what", ["artefact", "manifest"])
def test_a_fifo_in_a_bundle_never_hangs_analyse(tmp_path: Path, what: str) -> None:
    """SP14: a FIFO in place of an artefact (or of manifest.json) in a bundle directory given to
    `analyse`: no read that waits forever; the artefact is a blind spot, the manifest a clear
    message. (Before: `analyse` hung until killed.)"""
    bundle = tmp_path / FIXTURE.name
    shutil.copytree(FIXTURE, bundle)
    manifest = json.loads((bundle / "manifest.json").read_text())
    if what == "artefact":
        rec = next(p for p in manifest["probes"] if p["source"] == "pyspy" and p["artifact"])
        victim = bundle / rec["artifact"]
    else:
        victim = bundle / "manifest.json"
    victim.unlink()
    os.mkfifo(victim)
    run = run_cli("analyse", str(bundle), "-f", "json", hard_limit_s=30)
    assert_clean(run, bound_s=10.0)
    if what == "artefact":
        assert any("artefact missing" in b for b in run.blind_spots()), run.describe()
    else:
        assert run.rc == 3 and _says(run, "not a regular file"), run.describe()


# ---------------------------------------------------------------- SP15-SP16 --log-file (point 12)


def test_log_file_is_never_written_through_a_symlink(tmp_path: Path) -> None:
    """SP15: `--log-file runs.jsonl` planted as a symlink to a victim: the victim is untouched,
    the run still ends with its verdict and says why the line was not written."""
    victim = _victim(tmp_path)
    logs = tmp_path / "logs"
    logs.mkdir(mode=0o700)
    (logs / "runs.jsonl").symlink_to(victim)
    state = tmp_path / "hd" / "state.json"
    run = run_cli(*CHECK, "--state-file", str(state), "--log-file", str(logs / "runs.jsonl"))
    assert_clean(run, bound_s=30.0)
    assert victim.read_bytes() == VICTIM_TEXT
    assert "--log-file" in run.stdout and "symbolic link" in run.stdout, run.describe()
    assert state.is_file()


def test_log_file_is_private_and_a_fifo_never_blocks(tmp_path: Path) -> None:
    """SP16: a new log file is 0600 whatever the umask (was 0666 under umask 0); a FIFO planted
    as the log file (a reader holds it open) is refused, not written into, never waited on."""
    log = tmp_path / "logs" / "runs.jsonl"
    run = run_cli(
        *CHECK, "--state-file", str(tmp_path / "hd" / "s.json"), "--log-file", str(log), umask=0
    )
    assert_clean(run, bound_s=30.0)
    assert stat.S_IMODE(log.stat().st_mode) == 0o600, oct(log.stat().st_mode)
    assert json.loads(log.read_text().splitlines()[-1])["exit_code"] == run.rc
    fifo = tmp_path / "logs" / "fifo.jsonl"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    time.sleep(0.3)  # the reader has the FIFO open: a writer's open no longer fails by itself
    run = run_cli(*CHECK, "--state-file", str(tmp_path / "hd" / "s.json"), "--log-file", str(fifo))
    assert_clean(run, bound_s=30.0)
    assert "not a regular file" in run.stdout, run.describe()
    if reader.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # let the reader end
    reader.join(timeout=5)
    assert got == [b""], got


# ---------------------------------------------------------------- SP17-SP19 --prom-file (issue 32)


@contextmanager
def _sticky_shared_dir() -> Iterator[Path]:
    """A directory like /tmp (mode 1777) that uid 65534 can reach: under /tmp itself (pytest's
    own temp dirs are 0700, closed to other users)."""
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="hd-shared-", dir="/tmp"))
    d.chmod(0o1777)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _as_nobody(script: str, *args: str) -> subprocess.Popen[str]:
    """Start `/bin/sh -c script` as uid/gid 65534: what another local user does, for real."""
    return subprocess.Popen(
        ["/bin/sh", "-c", script, "sh", *args], stdout=subprocess.PIPE, text=True, cwd="/",
        user=NOBODY, group=NOBODY, extra_groups=[],
    )  # fmt: skip


def test_prom_file_through_a_symlink_another_user_planted_is_refused(tmp_path: Path) -> None:
    """SP17: `--prom-file /shared/metrics/hd.prom` where `metrics` is a symlink a uid-65534
    process planted in a 1777 directory, aimed at a root directory holding a file of that name:
    the link is not followed (prometheus_client wrote through it and renamed over the victim),
    the victim is untouched, the run still gives its verdict and says why the file was not
    written."""
    _root_only()
    aimed = tmp_path / "root-dir"
    aimed.mkdir(mode=0o755)
    victim = aimed / "hd.prom"
    victim.write_bytes(VICTIM_TEXT)
    with _sticky_shared_dir() as shared:
        assert _as_nobody('ln -s "$1" "$2"', str(aimed), str(shared / "metrics")).wait(30) == 0
        assert (shared / "metrics").lstat().st_uid == NOBODY
        state = tmp_path / "hd" / "state.json"
        run = run_cli(
            *CHECK, "--state-file", str(state), "--prom-file", str(shared / "metrics" / "hd.prom")
        )
    assert_clean(run, bound_s=30.0)
    assert victim.read_bytes() == VICTIM_TEXT
    assert sorted(p.name for p in aimed.iterdir()) == ["hd.prom"]
    doc = json.loads(run.stdout)
    assert doc["status"], run.describe()
    said = [f["message"] for f in doc["findings"] if f["rule"] == "watchdog.prom_file"]
    assert said and f"symbolic link of uid {NOBODY}" in said[0], run.describe()


def test_prom_file_temp_names_seen_once_cannot_be_planted(tmp_path: Path) -> None:
    """SP18: `watch --prom-file /shared/hd.prom` in a 1777 directory, and a uid-65534 process
    that lists the directory, learns the name of the temp file a run writes the metrics to
    (prometheus_client's `<path>.<pid>.<thread id>`: the same pid and thread on every run of one
    `watch`), and plants a symlink to a victim under that name once it is gone. The next runs
    wrote through it (the victim truncated); now every run's temp file has a new random name,
    created O_EXCL | O_NOFOLLOW: the planted link is never opened."""
    _root_only()
    victim = tmp_path / "victim"
    victim.write_bytes(VICTIM_TEXT)
    # list the directory in a loop; a temp file seen there is replaced, once gone, by a link
    # (in Python where a system one runs for any user: a shell loop is too slow to see it)
    spy = (
        'd=$1; victim=$2; seen="|"; n=0; i=0\n'
        "while [ $i -lt 3000000 ] && [ $n -lt 8 ]; do\n"
        "  i=$((i + 1))\n"
        '  for f in "$d"/hd.prom.* "$d"/.hd.prom.*; do\n'
        '    [ -e "$f" ] || continue\n'
        '    case "$seen" in *"|$f|"*) continue;; esac\n'
        '    while [ -e "$f" ] || [ -L "$f" ]; do :; done\n'
        '    ln -s "$victim" "$f" && seen="$seen$f|" && n=$((n + 1)) && echo "$f" >> "$d"/spy.log\n'
        "  done\n"
        "done\n"
    )
    fast = (
        "import os, sys, time\n"
        "d, victim = sys.argv[1], sys.argv[2]\n"
        "seen = set()\n"
        "end = time.monotonic() + 90\n"
        "while time.monotonic() < end and len(seen) < 8:\n"
        "    for e in os.scandir(d):\n"
        "        if 'hd.prom.' in e.name and e.name not in seen:\n"
        "            seen.add(e.name)\n"
        "            while os.path.lexists(e.path):\n"
        "                pass\n"
        "            os.symlink(victim, e.path)\n"
        "            with open(os.path.join(d, 'spy.log'), 'a') as log:\n"
        "                log.write(e.name + chr(10))\n"
    )
    with _sticky_shared_dir() as shared:
        prom = shared / "hd.prom"
        if os.access("/usr/bin/python3", os.X_OK):
            (shared / "spy.py").write_text(fast)
            (shared / "spy.py").chmod(0o644)
            spy = 'exec /usr/bin/python3 "$1"/spy.py "$@"'
        attacker = _as_nobody(spy, str(shared), str(victim))
        try:
            run = run_cli(
                "watch", "--local", "--window", "0.2", "--timeout", "8", "--interval", "1",
                "--max-runs", "6", "--state-file", str(tmp_path / "hd" / "s.json"),
                "--prom-file", str(prom), hard_limit_s=120,
            )  # fmt: skip
        finally:
            attacker.terminate()
            attacker.communicate(timeout=10)
        log = shared / "spy.log"
        planted = log.read_text().split() if log.exists() else []
        assert_clean(run, bound_s=120.0)
        # (the spy sees the old writer's temp file: it lived while the page was generated; the
        # new one lives ~0.1 ms, and whatever it is called, it is never a name seen before)
        assert victim.read_bytes() == VICTIM_TEXT, f"written through a planted link: {planted}"
        assert prom.is_file() and not prom.is_symlink()
        assert b"slime_hangdoctor_stalled" in prom.read_bytes()
        assert stat.S_IMODE(prom.stat().st_mode) == 0o644


def test_prom_file_directories_are_not_made_world_writable_under_umask_0(tmp_path: Path) -> None:
    """SP19: missing directories above `--prom-file` are made 0755 (readable by node-exporter,
    writable by the doctor's user only: they were 0777 under umask 0), the file 0644; a
    directory others may write to without a sticky bit is refused (anyone could replace the
    metrics there)."""
    prom = tmp_path / "textfile" / "collector" / "hd.prom"
    run = run_cli(
        *CHECK, "--state-file", str(tmp_path / "hd" / "s.json"), "--prom-file", str(prom), umask=0
    )
    assert_clean(run, bound_s=30.0)
    for d in (tmp_path / "textfile", prom.parent):
        assert stat.S_IMODE(d.stat().st_mode) == 0o755, (d, oct(d.stat().st_mode))
    assert stat.S_IMODE(prom.stat().st_mode) == 0o644
    assert b"slime_hangdoctor_exit_code" in prom.read_bytes()
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    run = run_cli(*CHECK, "--state-file", str(tmp_path / "hd" / "s.json"), "--prom-file",
                  str(open_dir / "hd.prom"))  # fmt: skip
    assert_clean(run, bound_s=30.0)
    assert not (open_dir / "hd.prom").exists()
    assert "others may write to" in run.stdout, run.describe()


# ---------------------------------------------------------------- SP20-SP21 -o/--output (issue 41 M1)


def test_report_is_never_written_through_a_planted_symlink(tmp_path: Path) -> None:
    """SP20: `-o /shared/report.md` where uid 65534 owns the directory and planted `report.md` as
    a symbolic link to a root-only file (outside a sticky directory, so the kernel's
    protected_symlinks does not stop root following it). The link is neither followed nor
    replaced, the root-only file is untouched, the report goes to standard output instead (the
    verdict is kept), and the run says why and exits 3 (a plain `write_text` overwrote it)."""
    _root_only()
    victim = _victim(tmp_path)
    victim.chmod(0o600)
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    os.chown(shared, NOBODY, NOBODY)
    report = shared / "report.md"
    report.symlink_to(victim)
    os.lchown(report, NOBODY, NOBODY)
    run = run_cli("analyse", str(FIXTURE), "-f", "markdown", "-o", str(report))
    assert_clean(run, bound_s=30.0)
    assert victim.read_bytes() == VICTIM_TEXT, "the report was written through the link"
    assert report.is_symlink() and os.readlink(report) == str(victim)
    assert run.rc == 3 and _says(run, "symbolic link (not followed, not replaced)"), run.describe()
    assert run.stdout.startswith("## HUNG in"), run.describe()  # the verdict, not lost


@pytest.mark.parametrize("reader", [False, True], ids=["no-reader", "reader"])
def test_report_into_a_fifo_never_blocks(tmp_path: Path, reader: bool) -> None:
    """SP21: a FIFO at the `-o` path (with no reader: a plain open for writing waits forever; with
    a reader holding it open: the report would go to whoever reads) is refused, never opened:
    the run ends at once with exit 3 and the report on standard output."""
    fifo = tmp_path / "report.json"
    os.mkfifo(fifo)
    got: list[bytes] = []
    if reader:
        threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True).start()
        time.sleep(0.3)  # the reader has the FIFO open
    run = run_cli("analyse", str(FIXTURE), "-f", "json", "-o", str(fifo), hard_limit_s=20.0)
    assert_clean(run, bound_s=20.0)
    assert run.rc == 3 and _says(run, "is not a regular file"), run.describe()
    assert json.loads(run.stdout)["status"] == "hung", run.describe()
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    if reader:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # let the reader end
        time.sleep(0.2)
        assert got == [b""], got


def test_report_replaces_a_file_of_ours_whole(tmp_path: Path) -> None:
    """-o onto an existing report of the caller's replaces it (new file, renamed over it: no
    leftover temp file), private (0600) whatever the umask."""
    report = tmp_path / "r.json"
    report.write_text("old")
    run = run_cli("analyse", str(FIXTURE), "-f", "json", "-o", str(report), umask=0)
    assert_clean(run, bound_s=30.0)
    assert run.rc == 2 and json.loads(report.read_text())["status"] == "hung", run.describe()
    assert stat.S_IMODE(report.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]
