"""Run the GPU test programs (gpu_job.py) on a private Ray head and point slime-hangdoctor at them.

Per program: submit the job through the Job API (the driver stays alive, as slime's does), wait for
its ranks, let the fault set in, then run the real CLI against it:

1. `slime-hangdoctor attach DASHBOARD --json --out <record>/gpu-h200-<program>` (no flight recorder),
2. `slime-hangdoctor attach DASHBOARD --flight-recorder --json --out <record>/gpu-h200-<program>-fr`,
3. `slime-hangdoctor check --local --json --stall-after 1s` (no Ray connection: titles only),

keep every verdict, exit code and wall time in `<record>/runs/<program>.json`, stop the job and end
its actor processes (by pid). `expectation_errors` says what is wrong with a verdict.

Used by test_gpu_programs.py (pytest -m gpu) and by run_device.sh; `python3 harness.py --backend gloo`
runs the same flow on CPU (gloo) to develop the harness without a GPU (verdicts are not checked there).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from slime_hangdoctor_demo import cluster  # noqa: E402

JOB = Path(__file__).resolve().with_name("gpu_job.py")
PROGRAMS = ("broadcast-hang", "train-stuck", "rank-killed", "allreduce-busy", "matmul-healthy")
SAFE_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
READY_TIMEOUT_S = 240.0
SETTLE_S = 6.0  # after the ranks are up: the fault sets in, RAS sees the communicators
KILL_SETTLE_S = 10.0  # after SIGKILL of a rank: RAS reports it missing after ~6 s (run2 captures)
CLI_TIMEOUT_S = 90.0


@dataclass(frozen=True)
class Expected:
    status: str
    stage: str | None = None
    culprit_rank: int | None = None


EXPECTED: dict[str, Expected] = {
    "broadcast-hang": Expected("hung", "nccl_broadcast", 1),
    "train-stuck": Expected("hung", "train", 1),
    "rank-killed": Expected("hung", "train", 1),
    "allreduce-busy": Expected("progressing"),
    "matmul-healthy": Expected("progressing"),
}


@dataclass
class CliRun:
    argv: list[str]
    rc: int
    wall_s: float
    verdict: dict[str, Any] | None
    stderr: str

    def to_json(self) -> dict[str, Any]:
        return {
            "argv": self.argv,
            "rc": self.rc,
            "wall_s": round(self.wall_s, 3),
            "verdict": self.verdict,
            "stderr": self.stderr[-4000:],
        }


@dataclass
class ProgramRun:
    program: str
    ranks: list[dict[str, Any]]
    gpu_of_rank: dict[int, int | None]
    runs: dict[str, CliRun] = field(default_factory=dict)
    killed_pid: int | None = None
    started_at: float = 0.0
    entrypoint: str = ""
    name: str = ""  # the recorded name (gpu-h200-<name>[-fr]); the program's by default

    def to_json(self) -> dict[str, Any]:
        return {
            "program": self.program,
            "name": self.name or self.program,
            "entrypoint": self.entrypoint,
            "ranks": self.ranks,
            "gpu_of_rank": {str(k): v for k, v in self.gpu_of_rank.items()},
            "killed_pid": self.killed_pid,
            "started_at": self.started_at,
            "expected": EXPECTED[self.program].__dict__,
            "runs": {k: v.to_json() for k, v in self.runs.items()},
        }


# --------------------------------------------------------------------------- Ray head with GPUs


def start_head(workdir: Path, num_gpus: int, num_cpus: int = 8) -> cluster.RayHead:
    """A private Ray head with GPUs (demo.cluster.start_head pins --num-gpus=0)."""
    import tempfile

    workdir.mkdir(parents=True, exist_ok=True)
    owner = Path(tempfile.mkdtemp(prefix="hdg-", dir="/tmp"))
    temp_dir = owner / "ray"
    gcs_port, dash_port, client_port, agent_port, monitor_port, metric_port = cluster.free_ports(6)
    head = cluster.RayHead(
        temp_dir=temp_dir,
        owner_dir=owner,
        match=(("ray.util.client.server", f":{gcs_port} "),),
        log=workdir / "ray-head.log",
        gcs_address=f"{cluster.NODE_IP}:{gcs_port}",
        dashboard_url=f"http://{cluster.NODE_IP}:{dash_port}",
    )
    args = [
        "--head",
        f"--node-ip-address={cluster.NODE_IP}",
        f"--port={gcs_port}",
        "--include-dashboard=true",
        f"--dashboard-host={cluster.NODE_IP}",
        f"--dashboard-port={dash_port}",
        f"--ray-client-server-port={client_port}",
        f"--dashboard-agent-listen-port={agent_port}",
        f"--num-cpus={num_cpus}",
        f"--num-gpus={num_gpus}",
        f"--temp-dir={temp_dir}",
        "--disable-usage-stats",
    ]
    env = {
        **SAFE_ENV,
        "AUTOSCALER_METRIC_PORT": str(monitor_port),
        "DASHBOARD_METRIC_PORT": str(metric_port),
        "RAY_DASHBOARD_ENABLE_PROFILING": "1",
        "RAY_AUTH_MODE": "disabled",  # a private throw-away head: no token (none is created)
    }
    try:
        cluster._ray_start(args, head.log, env, cluster.START_TIMEOUT_S)
        deadline = time.monotonic() + cluster.START_TIMEOUT_S
        cluster._wait_http(f"{head.dashboard_url}/api/version", deadline)
        cluster._wait_for(lambda: bool(cluster.list_nodes(head)), deadline, "the head node")
        head.node_ip = str(cluster.list_nodes(head)[0].get("node_ip") or cluster.NODE_IP)
    except BaseException:
        head.stop(timeout=3.0)
        raise
    return head


# --------------------------------------------------------------------------- one program


def gpu_of_pid(pid: int) -> int | None:
    """The NVML index of the GPU where `pid` holds memory (None without NVML)."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            if any(p.pid == pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)):
                return i
        return None
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def doctor(args: list[str], timeout: float = CLI_TIMEOUT_S) -> CliRun:
    """Run the real CLI (`python3 -m slime_hangdoctor ...`); the verdict is its JSON output."""
    argv = [sys.executable, "-m", "slime_hangdoctor", *args]
    env = {**os.environ, **SAFE_ENV, "PYTHONPATH": _pythonpath()}
    t0 = time.monotonic()
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT, check=False
        )
        rc, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc, out, err = -9, str(exc.stdout or ""), f"timed out after {timeout}s"
    wall = time.monotonic() - t0
    verdict = None
    with contextlib.suppress(ValueError):
        verdict = json.loads(out)
    if verdict is None and out.strip():
        err = out[-4000:] + "\n" + err
    return CliRun(argv[1:], rc, wall, verdict, err)


def _pythonpath() -> str:
    parts = [str(ROOT), *[p for p in os.environ.get("PYTHONPATH", "").split(":") if p]]
    return ":".join(dict.fromkeys(parts))


def _wait_ready(head: cluster.RayHead, job_id: str, ready: Path) -> dict[str, Any]:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if ready.exists():
            doc: dict[str, Any] = json.loads(ready.read_text())
            return doc
        info = cluster.job_info(head, job_id)
        if info.get("status") in cluster.TERMINAL_JOB_STATES:
            raise RuntimeError(f"job {job_id} ended early: {info}\n{_job_logs(head, job_id)}")
        time.sleep(0.5)
    raise RuntimeError(f"job {job_id} did not get ready in time\n{_job_logs(head, job_id)}")


def _job_logs(head: cluster.RayHead, job_id: str) -> str:
    status, doc = cluster.http_json("GET", f"{head.dashboard_url}/api/jobs/{job_id}/logs")
    text = doc.get("logs", "") if isinstance(doc, dict) else str(doc)
    return str(text)[-6000:]


def _stop(head: cluster.RayHead, job_id: str, pids: list[int]) -> None:
    """Stop the job, then end its actor processes by pid (a rank stuck in NCCL may ignore SIGTERM)."""
    cluster.http_json("POST", f"{head.dashboard_url}/api/jobs/{job_id}/stop", timeout=10.0)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.5)
    for pid in pids:
        if _alive(pid):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 15.0
    while time.monotonic() < deadline:
        info = cluster.job_info(head, job_id)
        if info.get("status") in cluster.TERMINAL_JOB_STATES and not any(_alive(p) for p in pids):
            break
        time.sleep(0.5)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _cleanup_files(tag: str, fr_dir: Path) -> None:
    for path in list(fr_dir.glob(f"hd-fr-{tag}-*")) + list(fr_dir.glob(f"hd-frpipe-{tag}-*")):
        with contextlib.suppress(OSError):
            path.unlink()
    for path in Path("/dev/shm").glob(f"hd-progress-{tag}-rank*"):
        with contextlib.suppress(OSError):
            path.unlink()


@dataclass
class Launched:
    """A running program: its job, ranks (rank, pid, GPU ids) and progress-file tag."""

    job_id: str
    tag: str
    ranks: list[dict[str, Any]]
    entrypoint: str

    @property
    def pids(self) -> list[int]:
        return [int(r["pid"]) for r in self.ranks]


@contextlib.contextmanager
def launch(
    head: cluster.RayHead,
    program: str,
    work: Path,
    *,
    backend: str = "nccl",
    extra_args: tuple[str, ...] = (),
) -> Iterator[Launched]:
    """Submit `program` through the Job API, wait for its ranks, stop it (and its actors) on exit."""
    work.mkdir(parents=True, exist_ok=True)
    fr_dir = Path("/tmp")
    tag = f"{program}-{os.getpid()}"
    ready = work / f"{program}.ready.json"
    ready.unlink(missing_ok=True)
    port = cluster.free_ports(1)[0]
    entry = (
        f"{sys.executable} {JOB} {program} --ready {ready} --backend {backend} "
        f"--port {port} --tag {tag} --fr-dir {fr_dir} {' '.join(extra_args)}"
    ).strip()
    job_id = cluster.submit_job(
        head,
        entry,
        working_dir=None,
        submission_id=f"hd-gpu-{program}-{int(time.time())}",
        env={
            **SAFE_ENV,
            "PYTHONPATH": _pythonpath(),
            "PYTHONUNBUFFERED": "1",
            "RAY_AUTH_MODE": "disabled",
        },
    )
    pids: list[int] = []
    try:
        doc = _wait_ready(head, job_id, ready)
        ranks = sorted(doc["ranks"], key=lambda r: r["rank"])
        pids = [int(r["pid"]) for r in ranks]
        yield Launched(job_id, tag, ranks, entry)
    finally:
        _stop(head, job_id, pids)
        (work / f"{program}.job.log").write_text(_job_logs(head, job_id))
        _cleanup_files(tag, fr_dir)


def run_program(
    head: cluster.RayHead,
    program: str,
    record: Path,
    *,
    backend: str = "nccl",
    window_s: float = 3.0,
    extra_args: tuple[str, ...] = (),
    name: str | None = None,
) -> ProgramRun:
    """Run one program and the doctor against it; bundles go to `record`/gpu-h200-<name>[-fr]."""
    record.mkdir(parents=True, exist_ok=True)
    work = record / "work"
    name = name or program
    with launch(head, program, work, backend=backend, extra_args=extra_args) as job:
        run = ProgramRun(
            program, job.ranks, {int(r["rank"]): gpu_of_pid(int(r["pid"])) for r in job.ranks}
        )
        run.started_at = time.time()
        run.entrypoint = job.entrypoint
        run.name = name
        time.sleep(SETTLE_S)
        if program == "rank-killed":
            run.killed_pid = job.pids[1]
            os.kill(job.pids[1], signal.SIGKILL)
            time.sleep(KILL_SETTLE_S)
        common = ["--json", "--window", str(window_s), "--timeout", "45"]
        for mode, extra in (("attach", []), ("attach-fr", ["--flight-recorder"])):
            out = record / f"gpu-h200-{name}{'-fr' if extra else ''}"
            shutil.rmtree(out, ignore_errors=True)
            Path(str(out) + ".tar.gz").unlink(missing_ok=True)
            run.runs[mode] = doctor(
                ["attach", head.dashboard_url, *common, *extra, "--out", str(out)]
            )
        state = work / f"{name}.state.json"
        state.unlink(missing_ok=True)
        run.runs["check-local"] = doctor(
            ["check", "--local", "--json", "--window", str(window_s), "--stall-after", "1s"]
            + ["--state-file", str(state)]
        )
        (record / "runs").mkdir(exist_ok=True)
        (record / "runs" / f"{name}.json").write_text(json.dumps(run.to_json(), indent=1))
        return run


# --------------------------------------------------------------------------- expectations


def expectation_errors(run: ProgramRun, name: str) -> list[str]:
    """What is wrong with the verdict of `run.runs[name]` (empty: right)."""
    exp = EXPECTED[run.program]
    cli = run.runs.get(name)
    if cli is None or cli.verdict is None:
        return [f"{name}: no verdict (rc {cli.rc if cli else '?'}): {cli.stderr if cli else ''}"]
    v = cli.verdict
    errors: list[str] = []
    if v.get("status") != exp.status:
        errors.append(f"{name}: status {v.get('status')} != {exp.status} ({v.get('summary')})")
    if exp.stage is not None and v.get("stage") != exp.stage:
        errors.append(f"{name}: stage {v.get('stage')} != {exp.stage}")
    if exp.culprit_rank is not None:
        culprits = v.get("culprits") or []
        want_gpu = run.gpu_of_rank.get(exp.culprit_rank)
        want_pid = next(int(r["pid"]) for r in run.ranks if r["rank"] == exp.culprit_rank)
        if not culprits:
            errors.append(f"{name}: no culprit (want rank {exp.culprit_rank})")
        else:
            c = culprits[0]
            if c.get("rank") != exp.culprit_rank:
                errors.append(f"{name}: culprit rank {c.get('rank')} != {exp.culprit_rank}")
            if want_gpu is not None and c.get("gpu") != want_gpu:
                errors.append(f"{name}: culprit GPU {c.get('gpu')} != {want_gpu}")
            if c.get("pid") not in (None, want_pid):
                errors.append(f"{name}: culprit pid {c.get('pid')} != {want_pid}")
    want_rc = {"hung": (1, 2), "progressing": (0,)}[exp.status]
    if cli.rc not in want_rc:
        errors.append(f"{name}: exit code {cli.rc} not in {want_rc}")
    return errors


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--record", type=Path, required=True)
    ap.add_argument("--backend", default="nccl", choices=("nccl", "gloo"))
    ap.add_argument("--programs", default=",".join(PROGRAMS))
    args = ap.parse_args(argv)
    gpus = 2 if args.backend == "nccl" else 0
    head = start_head(args.record / "work", num_gpus=gpus)
    failures = 0
    try:
        for program in args.programs.split(","):
            run = run_program(head, program, args.record, backend=args.backend)
            for name, cli in run.runs.items():
                v = cli.verdict or {}
                errs = expectation_errors(run, name) if args.backend == "nccl" else []
                failures += bool(errs)
                print(
                    f"{program:15} {name:12} rc={cli.rc} {cli.wall_s:5.1f}s "
                    f"{v.get('status')}/{v.get('stage')} {v.get('summary', '')[:110]}"
                    + (f"\n    WRONG: {errs}" if errs else ""),
                    flush=True,
                )
    finally:
        head.stop()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
