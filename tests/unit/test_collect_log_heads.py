"""The actor log head collector on this machine's real procfs: a real child process points its fd 1
and fd 2 at files named as Ray names a worker's logs (as Ray 2.60's core worker does), or at a
pipe; the collector reads the head of the files only, bounded, and names why not otherwise."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slime_hangdoctor.bundle import BundleWriter
from slime_hangdoctor.collect import log_heads as lh
from slime_hangdoctor.outcome import Outcome
from slime_hangdoctor.parsers.kernel import KERNEL
from slime_hangdoctor.parsers.log_heads import ACTOR_LOG_HEAD, parse_log_head
from slime_hangdoctor.parsers.nccl_ras import NCCL_RAS
from slime_hangdoctor.parsers.pyspy import PYSPY
from slime_hangdoctor.parsers.sockets import SOCKETS

WORKER = "worker-64e4653db7a019b8d66de20d68702bdcd40d7d4c8fedf933a20988ac-01000000"
LAUNCH = "[2026-12-01 09:00:00] sglang_engine.py:180 - Launch HttpServerEngineAdapter at: 127.0.0.1:15003"
UVICORN = "INFO:     Uvicorn running on http://127.0.0.1:15003 (Press CTRL+C to quit)"

# The child: point fd 1 and 2 at `<dir>/<WORKER>-<pid>.out|err` (unless told to keep a pipe on
# fd 2), write the start-up lines and then `filler` bytes of request lines, say ready, wait.
_CHILD = """
import os, sys
folder, worker, mode, filler = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
ready = int(sys.argv[7])
pid = os.getpid()
for fd, stream in ((1, "out"), (2, "err")):
    if mode == "pipe" and fd == 2:
        continue
    f = os.open(f"{folder}/{worker}-{pid}.{stream}", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(f, fd)
os.write(1, b":job_id:01000000\\n:actor_name:SGLangEngine\\n" + sys.argv[5].encode() + b"\\n")
os.write(2, b":job_id:01000000\\n:actor_name:SGLangEngine\\n" + sys.argv[6].encode() + b"\\n")
line = b'INFO:     127.0.0.1:40000 - "POST /generate HTTP/1.1" 200 OK\\n'
os.write(2, line * (filler // len(line)))
os.write(ready, b"ready")
os.close(ready)
sys.stdin.read()
"""


@pytest.fixture
def child(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[subprocess.Popen[bytes]]:
    mode, filler = getattr(request, "param", ("files", 0))
    r, w = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(tmp_path), WORKER, mode, str(filler), LAUNCH, UVICORN]
        + [str(w)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        pass_fds=(w,),
    )
    os.close(w)
    got = os.read(r, 5)
    os.close(r)
    assert got == b"ready", proc.stderr.read1(4096) if proc.stderr else None
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _writer(tmp_path: Path) -> BundleWriter:
    return BundleWriter(tmp_path / "b", command="test")


def test_heads_of_both_streams_are_read_and_name_the_url(
    tmp_path: Path, child: subprocess.Popen[bytes]
) -> None:
    w = _writer(tmp_path)
    recs = lh.record_log_heads(
        w, [(child.pid, "SGLangEngine")], node_ip="10.0.0.9", sample=0, timeout=5.0
    )
    assert [(r.source, r.target, r.outcome) for r in recs] == [
        (ACTOR_LOG_HEAD, f"SGLangEngine-{child.pid}-err", Outcome.OK),
        (ACTOR_LOG_HEAD, f"SGLangEngine-{child.pid}-out", Outcome.OK),
    ]
    err, out = recs
    assert err.meta["file"] == f"{WORKER}-{child.pid}.err" and err.meta["truncated"] is False
    head = parse_log_head((w.root / str(err.artifact)).read_bytes())
    assert head.served_url is not None and head.served_url.url == "http://127.0.0.1:15003"
    launched = parse_log_head((w.root / str(out.artifact)).read_bytes()).urls
    assert [(u.url, u.served) for u in launched] == [("http://127.0.0.1:15003", False)]
    assert all(r.node_ip == "10.0.0.9" and r.meta["pid"] == child.pid for r in recs)


@pytest.mark.parametrize("child", [("files", 300_000)], indirect=True)
def test_a_long_log_is_read_up_to_the_cap_from_its_start(
    tmp_path: Path, child: subprocess.Popen[bytes]
) -> None:
    w = _writer(tmp_path)
    err = lh.record_log_heads(w, [(child.pid, "SGLangEngine")], node_ip=None, sample=0, timeout=5)[
        0
    ]
    data = (w.root / str(err.artifact)).read_bytes()
    assert len(data) == lh.MAX_HEAD_BYTES and err.meta["truncated"] is True
    assert data.startswith(b":job_id:") and UVICORN.encode() in data


@pytest.mark.parametrize("child", [("pipe", 0)], indirect=True)
def test_a_pipe_is_never_read(tmp_path: Path, child: subprocess.Popen[bytes]) -> None:
    """fd 2 is a pipe (not Ray's file): not read, named; what the child wrote stays for its reader."""
    w = _writer(tmp_path)
    err, out = lh.record_log_heads(
        w, [(child.pid, "SGLangEngine")], node_ip=None, sample=0, timeout=5.0
    )
    assert err.outcome is Outcome.UNAVAILABLE and err.artifact is None
    assert "is not its Ray worker err log" in str(err.reason) and "pipe:" in str(err.reason)
    assert out.outcome is Outcome.OK
    assert child.stderr is not None and UVICORN.encode() in child.stderr.read1(4096)


def test_a_process_that_is_not_a_ray_worker_is_not_read(tmp_path: Path) -> None:
    """This test process's fd 2 is no `worker-...-<pid>.err` file: nothing is read."""
    head = lh.read_head(os.getpid(), "err", 2, time.monotonic() + 5)
    assert head.outcome is Outcome.UNAVAILABLE and head.data is None


def test_a_gone_process_is_unavailable(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    head = lh.read_head(proc.pid, "err", 2, time.monotonic() + 5)
    assert head.outcome is Outcome.UNAVAILABLE and "is gone" in str(head.reason)


def test_the_deadline_is_named(tmp_path: Path, child: subprocess.Popen[bytes]) -> None:
    head = lh.read_head(child.pid, "err", 2, deadline=time.monotonic() - 1)
    assert head.outcome is Outcome.TIMED_OUT and head.data is None


def test_denied_is_named(tmp_path: Path) -> None:
    """A procfs whose fd folder cannot be read (another user's process): `denied`."""
    fake = tmp_path / "proc"
    (fake / "4242" / "fd").mkdir(parents=True)
    os.symlink(f"/x/{WORKER}-4242.err", fake / "4242" / "fd" / "2")
    (fake / "4242" / "fd").chmod(0o000)
    try:
        if os.access(fake / "4242" / "fd", os.R_OK):
            pytest.skip("running as root: a mode-000 directory is still readable")
        head = lh.read_head(4242, "err", 2, time.monotonic() + 5, procfs=str(fake))
    finally:
        (fake / "4242" / "fd").chmod(0o700)
    assert head.outcome is Outcome.DENIED


def test_a_link_to_another_pids_log_is_not_read(tmp_path: Path) -> None:
    """The link must name the log of this very pid (a reused fd number is not enough)."""
    fake = tmp_path / "proc"
    (fake / "4242" / "fd").mkdir(parents=True)
    other = tmp_path / f"{WORKER}-999.err"
    other.write_text(UVICORN + "\n")
    os.symlink(other, fake / "4242" / "fd" / "2")
    head = lh.read_head(4242, "err", 2, time.monotonic() + 5, procfs=str(fake))
    assert head.outcome is Outcome.UNAVAILABLE and head.data is None


# A real process titled as an SGLangEngine actor whose server is gone: no listening child, its fd 2
# on a Ray-named worker log that holds the uvicorn line of the server it once had.
_ENGINE_ACTOR = """
import os, sys
folder, worker, line = sys.argv[1], sys.argv[2], sys.argv[3]
f = os.open(f"{folder}/{worker}-{os.getpid()}.err", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
os.dup2(f, 2)
os.write(2, line.encode() + b"\\n")
print("ready", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def engine_actor(tmp_path: Path) -> Iterator[int]:
    from tests.titled import titled_python

    proc = subprocess.Popen(
        titled_python("ray::SGLangEngine", _ENGINE_ACTOR, str(tmp_path), WORKER, UVICORN),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        yield proc.pid
    finally:
        proc.kill()
        proc.wait(timeout=10)


@pytest.mark.parametrize("read_before", [False, True])
def test_node_sample_learns_the_url_of_a_server_less_engine_actor(
    engine_actor: int, tmp_path: Path, read_before: bool
) -> None:
    """The node task (the same on every node) reads the log heads of the engine actors it scanned
    that have no listening child; the topology it then builds ties the logged URL to that actor,
    for the endpoint probes of the same sample. A pid whose heads this run read already is not
    read again."""
    import concurrent.futures as cf

    from slime_hangdoctor.collect.node import partial_snapshot, sample_node
    from slime_hangdoctor.collect.node_probe import NodeSpec
    from slime_hangdoctor.collect.options import CollectOptions, Deadline
    from slime_hangdoctor.topology import build_topology

    writer = _writer(tmp_path)
    spec = NodeSpec(
        "10.0.0.5",
        0,
        roots=frozenset({engine_actor}),
        off=frozenset(
            {
                NCCL_RAS,
                SOCKETS,
                KERNEL,
                PYSPY,
            }
        ),
        read_before=((ACTOR_LOG_HEAD, frozenset({engine_actor})),)
        if read_before
        else (),
    )
    with cf.ThreadPoolExecutor(max_workers=2) as pool:
        sample_node(writer, spec, CollectOptions(), Deadline(30.0), pool)
    heads = [r for r in writer.records if r.source == ACTOR_LOG_HEAD]
    engines = build_topology(partial_snapshot(writer)).engines
    if read_before:
        assert heads == [] and engines == ()
        return
    assert {(r.meta["stream"], r.outcome) for r in heads} >= {("err", Outcome.OK)}
    assert [(e.url, e.source, e.actor_pid, e.node_ip) for e in engines] == [
        ("http://127.0.0.1:15003", "actor-log", engine_actor, "10.0.0.5")
    ]
    assert "Uvicorn running on http://127.0.0.1:15003" in engines[0].origin


def test_a_head_is_redacted_like_every_artefact(tmp_path: Path) -> None:
    """SGLang logs its server arguments at start-up, the API key among them: the stored head has
    the doctor's known secrets blanked (BundleWriter.add), the URL line kept."""
    from tests.titled import titled_python

    secret = "sk-demo-0123456789abcdef"
    line = f"server_args=ServerArgs(host='127.0.0.1', port=15003, api_key='{secret}')\n{UVICORN}"
    proc = subprocess.Popen(
        titled_python("ray::SGLangEngine", _ENGINE_ACTOR, str(tmp_path), WORKER, line),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        w = BundleWriter(tmp_path / "b", command="test", known_secrets=(secret,))
        err = lh.record_log_heads(
            w, [(proc.pid, "SGLangEngine")], node_ip=None, sample=0, timeout=5
        )
    finally:
        proc.kill()
        proc.wait(timeout=10)
    data = (w.root / str(err[0].artifact)).read_bytes()
    assert secret.encode() not in data and b"api_key=" in data
    assert parse_log_head(data).served_url is not None


# A real process titled as slime's RolloutManager whose stdout is a Ray-named worker log holding the
# head the demo's RolloutManager wrote (recorded: analysis/demo/router_killed.tar.gz,
# RolloutManager-24085-out.s0.log, written byte for byte), and whose forked router child was
# SIGKILLed: its zombie.
_ROLLOUT_MANAGER = """
import multiprocessing, os, signal, sys, time
folder, worker, head = sys.argv[1], sys.argv[2], sys.argv[3]
f = os.open(f"{folder}/{worker}-{os.getpid()}.out", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
os.dup2(f, 1)
with open(head, "rb") as src:
    os.write(1, src.read())
child = multiprocessing.get_context("fork").Process(target=time.sleep, args=(120,), daemon=True)
child.start()
os.kill(child.pid, signal.SIGKILL)
while open(f"/proc/{child.pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
    time.sleep(0.02)
sys.stderr.write(f"{child.pid}\\n")
sys.stderr.flush()
sys.stdin.read()
"""
RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "analysis" / "demo"


def test_node_sample_ties_a_killed_router_to_its_rollout_manager(tmp_path: Path) -> None:
    """The node task reads the log head of a RolloutManager with no listening router below it;
    the topology it then builds has the router its log says it launched, at the pid of its zombie
    child, for the router probes of the same sample."""
    import concurrent.futures as cf
    import tarfile

    from slime_hangdoctor.collect.node import partial_snapshot, sample_node
    from slime_hangdoctor.collect.node_probe import NodeSpec
    from slime_hangdoctor.collect.options import CollectOptions, Deadline
    from slime_hangdoctor.topology import build_topology
    from slime_hangdoctor.verdict import Role
    from tests.titled import titled_python

    with tarfile.open(RECORDED / "router_killed.tar.gz") as tar:
        recorded = tar.extractfile(
            "bundle/raw/actor_log_head/192.0.2.2/RolloutManager-24085-out.s0.log"
        )
        assert recorded is not None
        (tmp_path / "head.log").write_bytes(recorded.read())
    argv = titled_python(
        "ray::RolloutManager.generate",
        _ROLLOUT_MANAGER,
        str(tmp_path),
        WORKER,
        str(tmp_path / "head.log"),
    )
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stderr is not None
        zombie = int(proc.stderr.readline())
        writer = _writer(tmp_path)
        spec = NodeSpec(
            "10.0.0.5",
            0,
            roots=frozenset({proc.pid}),
            off=frozenset(
                {
                    NCCL_RAS,
                    SOCKETS,
                    KERNEL,
                    PYSPY,
                }
            ),
        )
        with cf.ThreadPoolExecutor(max_workers=2) as pool:
            sample_node(writer, spec, CollectOptions(), Deadline(30.0), pool)
        heads = [r for r in writer.records if r.source == ACTOR_LOG_HEAD]
        assert {(r.meta["stream"], r.outcome) for r in heads} >= {("out", Outcome.OK)}
        topo = build_topology(partial_snapshot(writer))
        (router,) = topo.by_role(Role.ROUTER)
        assert (router.pid, router.parent_pid) == (zombie, proc.pid)
        assert router.engine_url == "http://127.0.0.1:3424" and topo.routers == (router.engine_url,)
    finally:
        proc.kill()
        proc.wait(timeout=10)
