"""Against a real Ray 2.60 head: address forms, dashboard capture, process scan, py-spy dumps, and
the doctor's node probes (their answers are read as bytes, never unpickled: issue 32 point 8).

One head for the whole module (about 6 s and 600 MB); it runs a slime-shaped job submitted through
the Job API: a driver blocked in `ray.get` on two actors (num_cpus=0) that block in a method.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from slime_hangdoctor.bundle import BundleWriter, dumps_json
from slime_hangdoctor.collect import address
from slime_hangdoctor.collect.address import resolve_cluster
from slime_hangdoctor.collect.dashboard import DashboardClient, capture_state, worker_traceback
from slime_hangdoctor.collect.processes import record_processes, scan_processes
from slime_hangdoctor.collect.pyspy import dump_stack, find_pyspy, process_state
from slime_hangdoctor.collect.remote import RemoteNode
from slime_hangdoctor.errors import RayUnreachable
from slime_hangdoctor.outcome import Outcome
from slime_hangdoctor.parsers.processes import PROCESSES, parse_processes
from slime_hangdoctor.parsers.ray_state import (
    RAY_DASHBOARD,
    parse_actors,
    parse_jobs,
    parse_node_summary,
    parse_nodes,
    parse_tasks,
)
from slime_hangdoctor_demo.cluster import (
    RayHead,
    free_ports,
    list_nodes,
    start_head,
    start_worker_node,
    stop_job,
    submit_job,
    wait_for_job_status,
)

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(240)]

DRIVER = """
import socket, threading, ray

@ray.remote(num_cpus=0)
class RolloutManager:
    def __init__(self):
        self.ev = threading.Event()
    def generate(self, rollout_id):
        self.ev.wait()

@ray.remote(num_cpus=0)
class MegatronTrainRayActor:
    def __init__(self, rank):
        self.rank = rank
    def train(self, rollout_id):
        a, b = socket.socketpair()
        self._keep = (a, b)
        return a.recv(1)

ray.init()
rm = RolloutManager.remote()
trainer = MegatronTrainRayActor.remote(0)
ray.get([rm.generate.remote(0), trainer.train.remote(0)])
"""


@dataclass(frozen=True)
class Job:
    head: RayHead
    submission_id: str
    node_ip: str
    driver_pid: int
    actor_pids: dict[str, int]  # class name -> pid


def _get(head: RayHead, path: str) -> bytes:
    res = DashboardClient(head.dashboard_url, token="", timeout=5.0).get(path)
    assert res.status == 200, (path, res.status, res.error, res.text[:300])
    return res.body


def _wait_running(head: RayHead, deadline: float) -> dict[str, int]:
    """class name -> worker pid, once both actor methods are RUNNING (the methods themselves: an
    actor's creation task is reported RUNNING until its FINISHED event arrives, which on a loaded
    machine can come after the test has started to read)."""
    query = "/api/v0/tasks?detail=1&filter_keys=state&filter_predicates=%3D&filter_values=RUNNING"
    methods = {"RolloutManager.generate", "MegatronTrainRayActor.train"}
    while True:
        tasks = parse_tasks(_get(head, query))
        pids = {t.name: t.worker_pid for t in tasks if t.worker_pid and t.name in methods}
        if methods <= set(pids):
            return {k.split(".")[0]: int(v) for k, v in pids.items() if v}
        assert time.monotonic() < deadline, f"tasks not running: {tasks}"
        time.sleep(0.3)


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Job]:
    work = tmp_path_factory.mktemp("ray")
    head = start_head(work / "head", env={"RAY_DASHBOARD_ENABLE_PROFILING": "1"})
    try:
        src = work / "job"
        src.mkdir()
        (src / "driver.py").write_text(DRIVER)
        sid = submit_job(
            head,
            f"{sys.executable} driver.py",
            working_dir=src,
            submission_id="slime-hang-1",
            env={"NCCL_DEBUG": "WARN"},
        )
        wait_for_job_status(head, sid, ("RUNNING",), timeout=60)
        actors = _wait_running(head, time.monotonic() + 60)
        jobs = parse_jobs(_get(head, "/api/jobs/"))
        driver = next(j for j in jobs if j.submission_id == sid)
        assert driver.driver_pid is not None
        yield Job(head, sid, head.node_ip, driver.driver_pid, actors)
        stop_job(head, sid)
    finally:
        head.stop()
    assert not head.pids(), "processes of the test head survived stop()"


@pytest.fixture
def writer(tmp_path: Path) -> BundleWriter:
    return BundleWriter(tmp_path / "bundle", command="test")


# --------------------------------------------------------------------------- address forms


def test_resolve_dashboard_url(job: Job) -> None:
    cluster = resolve_cluster(job.head.dashboard_url, timeout=5, token=None)
    assert cluster.dashboard_url == job.head.dashboard_url
    assert cluster.ray_version == "2.60.0"


@pytest.mark.parametrize("way", ["process", "kv"])
def test_resolve_gcs_address_reads_dashboard_from_gcs(
    job: Job, way: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GCS on this machine: its dashboard is the one its Ray dashboard process serves (read from
    /proc, no gRPC); without such a process (`kv`: none is recognised), the one its KV names."""
    if way == "kv":
        monkeypatch.setattr(address, "DASHBOARD_SCRIPT", b"/no/such/dashboard.py")
    cluster = resolve_cluster(job.head.gcs_address, timeout=5, token=None)
    assert cluster.dashboard_url == job.head.dashboard_url
    assert cluster.gcs_address == job.head.gcs_address
    said = " ".join(cluster.tried)
    if way == "kv":
        assert any(t.startswith("gcs ") for t in cluster.tried), cluster.tried
    else:
        assert "dashboard process" in said, cluster.tried
        assert not any(t.startswith("gcs ") for t in cluster.tried), "the KV was asked too"


def test_resolve_dashboard_without_scheme(job: Job) -> None:
    bare = job.head.dashboard_url.removeprefix("http://")
    cluster = resolve_cluster(bare, timeout=5, token=None)
    assert cluster.dashboard_url == job.head.dashboard_url


def test_resolve_auto_from_ray_address(job: Job, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_API_SERVER_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_ADDRESS", job.head.gcs_address)
    cluster = resolve_cluster("auto", timeout=5, token=None)
    assert cluster.dashboard_url == job.head.dashboard_url


def test_resolve_auto_from_local_cluster_file(
    job: Job, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Ray makes its temp dir 0777 without a sticky bit, so its files are not trusted; with no
    token anywhere (none given, none in the environment, no ~/.ray/auth_token) there is nothing
    to lose and the address is still tried (docs/reliability.md TM3)."""
    for var in ("RAY_API_SERVER_ADDRESS", "RAY_ADDRESS", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.ray/auth_token of the machine's user
    assert job.head.owner_dir is not None
    monkeypatch.setenv("RAY_TMPDIR", str(job.head.owner_dir))  # Ray's temp dir is <it>/ray
    cluster = resolve_cluster(None, timeout=5, token=None)
    assert cluster.dashboard_url == job.head.dashboard_url
    assert any("ray_current_cluster" in t for t in cluster.tried)


def test_dead_address_fails_fast_listing_forms(monkeypatch: pytest.MonkeyPatch) -> None:
    if DashboardClient("http://127.0.0.1:8265", token="").get("/api/version").status is not None:
        pytest.skip("a dashboard on 127.0.0.1:8265 would answer the host:8265 fallback")
    (port,) = free_ports(1)
    t0 = time.monotonic()
    with pytest.raises(RayUnreachable) as err:
        resolve_cluster(f"127.0.0.1:{port}", timeout=3, token=None)
    assert time.monotonic() - t0 < 5.0  # Ray's own client would block ~35 s here
    message = str(err.value)
    assert f"gcs 127.0.0.1:{port}: connection refused" in message
    assert f"http://127.0.0.1:{port}: connection refused" in message


# --------------------------------------------------------------------------- dashboard capture


def test_capture_state_bodies_parse(job: Job, writer: BundleWriter) -> None:
    client = DashboardClient(job.head.dashboard_url, token="", timeout=5.0)
    records = {r.target: r for r in capture_state(writer, client, sample=0)}
    bad = {k: (r.outcome, r.reason) for k, r in records.items() if r.outcome is not Outcome.OK}
    assert not bad

    def body(target: str) -> bytes:
        rec = records[target]
        assert rec.artifact is not None and rec.source == RAY_DASHBOARD
        return (writer.root / rec.artifact).read_bytes()

    actors = {a.class_name: a for a in parse_actors(body("actors"))}
    assert actors["RolloutManager"].pid == job.actor_pids["RolloutManager"]
    assert actors["MegatronTrainRayActor"].state == "ALIVE"
    running = {t.name: t for t in parse_tasks(body("tasks_running"))}
    assert running["RolloutManager.generate"].worker_pid == job.actor_pids["RolloutManager"]
    assert running["MegatronTrainRayActor.train"].state == "RUNNING"
    (node,) = parse_nodes(body("nodes"))
    assert node.is_head and node.node_ip == job.node_ip
    jobs = {j.submission_id: j for j in parse_jobs(body("jobs"))}
    assert jobs[job.submission_id].driver_pid == job.driver_pid
    assert jobs[job.submission_id].status == "RUNNING"
    (series,) = parse_node_summary(body("node_summary"))
    assert series.node_ip == job.node_ip and series.samples[0].gpus == ()
    assert json.loads(body("profiling_enabled"))["data"]["profilingEnabled"] is True
    assert records["tasks_running"].meta["endpoint"] == "/api/v0/tasks"


def test_worker_traceback_ok_and_unknown_pid(job: Job, writer: BundleWriter) -> None:
    client = DashboardClient(job.head.dashboard_url, token="", timeout=5.0)
    pid = job.actor_pids["RolloutManager"]
    rec = worker_traceback(writer, client, pid=pid, node_ip=job.node_ip, sample=0, timeout=10.0)
    assert rec.outcome is Outcome.OK, rec.reason
    assert rec.artifact is not None
    text = (writer.root / rec.artifact).read_text()
    assert f"Process {pid}: ray::RolloutManager.generate" in text
    assert "Event.wait" in text

    dead = _dead_pid()
    rec = worker_traceback(writer, client, pid=dead, node_ip=job.node_ip, sample=0, timeout=10.0)
    assert rec.outcome is Outcome.FAILED
    assert rec.reason is not None and "could not dump" in rec.reason


# --------------------------------------------------------------------------- processes


def test_scan_finds_actors_driver_not_daemons(job: Job, writer: BundleWriter) -> None:
    doc = scan_processes(job.node_ip, extra_pids={job.driver_pid})
    procs = {p.pid: p for p in parse_processes(dumps_json(doc))}
    assert procs[job.actor_pids["RolloutManager"]].title == "ray::RolloutManager.generate"
    assert (
        procs[job.actor_pids["MegatronTrainRayActor"]].title == "ray::MegatronTrainRayActor.train"
    )
    driver = procs[job.driver_pid]
    assert "driver.py" in driver.title and driver.node_ip == job.node_ip
    assert driver.env.get("NCCL_DEBUG") == "WARN"  # allow-listed, from the job's runtime_env
    assert not [p for p in procs.values() if p.title.startswith("ray::DashboardAgent")]
    assert all(p.cpu_seconds is not None for p in procs.values())

    rec = record_processes(writer, node_ip=job.node_ip, sample=1, extra_pids={job.driver_pid})
    assert rec.outcome is Outcome.OK and rec.source == PROCESSES
    assert rec.artifact is not None
    stored = parse_processes((writer.root / rec.artifact).read_text())
    assert {p.pid for p in stored} >= set(job.actor_pids.values())


# --------------------------------------------------------------------------- py-spy


def test_dump_stack_json_leaves_target_running(job: Job, writer: BundleWriter) -> None:
    pid = job.actor_pids["MegatronTrainRayActor"]
    rec = dump_stack(writer, pid, node_ip=job.node_ip, sample=0, timeout=10.0)
    assert rec.outcome is Outcome.OK, rec.reason
    assert rec.artifact is not None and rec.meta["format"] == "json"
    threads = json.loads((writer.root / rec.artifact).read_text())
    frames = [f["name"] for t in threads for f in t["frames"]]
    assert "MegatronTrainRayActor.train" in frames
    assert process_state(pid) not in ("T", "t")


def test_dump_stack_native_text(job: Job, writer: BundleWriter) -> None:
    pid = job.actor_pids["RolloutManager"]
    rec = dump_stack(writer, pid, node_ip=job.node_ip, sample=0, timeout=20.0, native=True)
    assert rec.outcome is Outcome.OK, rec.reason
    assert rec.artifact is not None and rec.meta["format"] == "text"
    text = (writer.root / rec.artifact).read_text()
    assert text.startswith(f"Process {pid}: ray::RolloutManager.generate")


def test_pyspy_that_never_exits_times_out(job: Job, writer: BundleWriter, tmp_path: Path) -> None:
    fake = _script(tmp_path / "bin" / "py-spy", "#!/bin/sh\nexec sleep 1000\n")
    pid = job.actor_pids["RolloutManager"]
    t0 = time.monotonic()
    rec = dump_stack(writer, pid, node_ip=job.node_ip, sample=0, timeout=1.0, pyspy=str(fake))
    assert time.monotonic() - t0 < 2.0
    assert rec.outcome is Outcome.TIMED_OUT
    assert rec.artifact is None
    assert process_state(pid) not in ("T", "t")


def test_stopped_target_is_resumed_after_timeout(writer: BundleWriter, tmp_path: Path) -> None:
    # A stand-in py-spy that stops its target and hangs: what a wedged ptrace attach leaves.
    fake = _script(tmp_path / "py-spy", '#!/bin/sh\nkill -STOP "$3"\nexec sleep 1000\n')
    target = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        rec = dump_stack(writer, target.pid, node_ip=None, sample=0, timeout=1.0, pyspy=str(fake))
        assert rec.outcome is Outcome.TIMED_OUT
        assert rec.meta.get("sigcont") is True
        assert rec.reason is not None and "SIGCONT" in rec.reason
        assert process_state(target.pid) not in ("T", "t")
    finally:
        target.kill()
        target.wait(timeout=10)


def test_pyspy_on_path_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _script(tmp_path / "py-spy", "#!/bin/sh\nexit 0\n")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_pyspy() == str(fake)


def test_pyspy_missing_gone_and_denied(writer: BundleWriter, tmp_path: Path) -> None:
    rec = dump_stack(
        writer, os.getpid(), node_ip=None, sample=0, timeout=5.0, pyspy=str(tmp_path / "nope")
    )
    assert rec.outcome is Outcome.UNAVAILABLE
    assert rec.reason is not None and "pip install py-spy" in rec.reason

    rec = dump_stack(writer, _dead_pid(), node_ip=None, sample=0, timeout=5.0)
    assert (rec.outcome, rec.reason) == (Outcome.UNAVAILABLE, "process exited")

    real = find_pyspy()
    if real is None or shutil.which("setpriv") is None or os.geteuid() != 0:
        pytest.skip("needs root, setpriv and py-spy to run py-spy as an unprivileged user")
    shared = Path(tempfile.mkdtemp(prefix="hd-pyspy-"))  # readable by 'nobody', unlike tmp_path
    try:
        os.chmod(shared, 0o755)
        copy = shared / "py-spy-real"
        shutil.copy(real, copy)
        os.chmod(copy, 0o755)
        nobody = _script(
            shared / "py-spy",
            f'#!/bin/sh\nexec setpriv --reuid=65534 --regid=65534 --clear-groups {copy} "$@"\n',
        )
        os.chmod(nobody, 0o755)
        target = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            rec = dump_stack(
                writer, target.pid, node_ip=None, sample=0, timeout=10.0, pyspy=str(nobody)
            )
        finally:
            target.kill()
            target.wait(timeout=10)
    finally:
        shutil.rmtree(shared, ignore_errors=True)
    assert rec.outcome is Outcome.DENIED, rec.reason
    assert rec.reason is not None and "CAP_SYS_PTRACE" in rec.reason
    assert rec.artifact is None  # py-spy's stderr stays out of the bundle


# --------------------------------------------------------------------------- second node


def test_worker_node_joins_with_its_resources_and_stops(job: Job, tmp_path: Path) -> None:
    node = start_worker_node(job.head, tmp_path, resources={"slime_rollout": 1.0})
    try:
        nodes = [n for n in list_nodes(job.head) if n.get("state") == "ALIVE"]
        assert len(nodes) == 2
        assert node.pids(), "the worker node's processes are found by its temp dir"
        head_pids = job.head.pids()
        assert not node.pids() & {job.driver_pid, *job.actor_pids.values()}
    finally:
        node.stop()
    assert not node.pids()
    assert job.head.pids() >= {job.driver_pid, *job.actor_pids.values()}
    assert head_pids


# --------------------------------------------------------------------------- node probes


CHILD = Path(__file__).with_name("ray_driver_child.py")


def _in_a_doctor_process(job: Job, scenario: str, spec: dict[str, object]) -> None:
    """Run `scenario` of ray_driver_child.py in a process of its own, as `attach` runs: Ray's core
    worker ends its process (exit code 1) when it loses its raylet or the GCS, which in the pytest
    process would end the suite without a word. A failure says the child's exit code, its output
    and the end of its core worker's log."""
    spec = {"gcs": job.head.gcs_address, "dashboard": job.head.dashboard_url, **spec}
    with subprocess.Popen(
        [sys.executable, str(CHILD), scenario, json.dumps(spec)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            out, err = proc.communicate(timeout=200)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
    logs = job.head.temp_dir.glob(f"session_*/logs/python-core-driver-*_{proc.pid}.log")
    tail = "".join(log.read_text(errors="replace")[-3000:] for log in logs)
    assert proc.returncode == 0 and f"{scenario}: ok" in out, (
        f"exit {proc.returncode}\n{out[-3000:]}\n{err[-6000:]}\ncore-driver log:\n{tail}"
    )


def _head_node(job: Job) -> RemoteNode:
    (node,) = [n for n in list_nodes(job.head) if n.get("state") == "ALIVE"]
    return RemoteNode(str(node["node_id"]), str(node["node_ip"]))


def test_one_probe_per_node_answers_both_samples(job: Job, tmp_path: Path) -> None:
    """A node's probe is created once and answers both samples (and its GPU readings) as plain
    bytes that join the bundle as records of that node (ray_driver_child.py)."""
    node = _head_node(job)
    spec: dict[str, object] = {
        "node_id": node.node_id,
        "node_ip": node.node_ip,
        "roots": sorted(job.actor_pids.values()),
        "bundle": str(tmp_path / "bundle"),
    }
    _in_a_doctor_process(job, "one_probe_answers_both_samples", spec)


def test_a_late_probe_keeps_its_window_and_a_failed_gpu_call_costs_its_gpus(
    job: Job, tmp_path: Path
) -> None:
    """Issue 46: a probe asked for both samples at once takes them a window apart; its GPU
    readings' call failed (the probe's worker killed) is a GPU blind spot of that node, not the
    node (ray_driver_child.py)."""
    node = _head_node(job)
    spec: dict[str, object] = {
        "node_id": node.node_id,
        "node_ip": node.node_ip,
        "roots": sorted(job.actor_pids.values()),
        "bundle": str(tmp_path / "bundle"),
    }
    _in_a_doctor_process(job, "a_late_probe_keeps_its_window", spec)


def test_a_node_answer_carrying_a_pickle_runs_no_code_in_the_doctor(
    job: Job, tmp_path: Path
) -> None:
    """Issue 32 point 8: a node's pickle (and a task's exception that runs code when unpickled)
    is not read by the doctor and runs nothing in its process; Ray's own `ray.get` runs it (the
    control). The checks are in ray_driver_child.py; the marker file is checked here too."""
    marker = tmp_path / "ran-in-the-doctor"
    _in_a_doctor_process(job, "a_pickle_runs_no_code", {"marker": str(marker)})
    assert marker.read_text() == "pwned", "the control ran the payload in the doctor"


def test_the_doctors_ray_driver_killed_mid_call_costs_that_call(job: Job, tmp_path: Path) -> None:
    """Issue 43 item 1: the driver's process killed while a node's sample is under way: the node
    is a blind spot naming the kill, and a new driver process answers the next run (checks in
    ray_driver_child.py)."""
    node = _head_node(job)
    spec: dict[str, object] = {
        "node_id": node.node_id,
        "node_ip": node.node_ip,
        "roots": sorted(job.actor_pids.values()),
        "bundle": str(tmp_path / "bundle"),
    }
    _in_a_doctor_process(job, "a_driver_killed_mid_call_costs_the_call", spec)


# --------------------------------------------------------------------------- helpers


def _script(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=30)
    return proc.pid
