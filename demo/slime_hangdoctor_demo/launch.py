"""Start the demo: a private Ray head, the slime-shaped job (job/train.py) submitted through
the Job API with one injected fault, and a handle to wait for it and to stop everything.

Readiness is read from the job's own log (the Job API): healthy runs are ready after a few
training steps, faulty runs (a progressing one too, e.g. a slow checkpoint) after the job logs
`DEMO FAULT ARMED` plus a short settle time (the moment the blocking call is entered) — or, for
start-up faults, after the engine plan line.

Every process the demo starts carries the environment variable `SLIME_HANGDOCTOR_DEMO=<id>`
(Ray passes the job's env to its actors; the engines' server and scheduler children inherit it),
so `DemoRun.stop` finds and ends orphans too.
"""

from __future__ import annotations

import re
import shlex
import shutil
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from slime_hangdoctor_demo import cluster
from slime_hangdoctor_demo.faults import FaultSpec, get_fault, server_fault_supported

JOB_DIR = Path(__file__).resolve().parent / "job"
# The source layouts the demo job can run as: slime's own, miles's (radixark/miles @ 31f1ca961),
# derived from it at launch by `miles_job` (slime's package renamed `miles/`, RolloutManager's
# module where miles keeps it; its weight updates open miles main's weight-update session), and
# slime's next layout (slime's open work, THUDM/slime@15b8e507: a detached ServingCluster actor
# starts the routers and the engines; the job's `--serving-cluster`).
JOB_LAYOUTS = ("slime", "miles", "slime-next")
# extra arguments of the job for a layout
LAYOUT_ARGS: dict[str, tuple[str, ...]] = {"slime-next": ("--serving-cluster",)}
# slime file -> where miles has it (at 31f1ca961: miles/ray/rollout/rollout_manager.py:54
# `class RolloutManager`; update_weight_from_distributed/broadcast.py:21 `class
# UpdateWeightFromDistributed`); every other file of the job is where miles has it already.
MILES_MOVES = {
    "slime/ray/rollout.py": "miles/ray/rollout/rollout_manager.py",
    # miles's session server start (slime has none: the demo carries miles's, see
    # job/slime/rollout/session/)
    "slime/ray/router_manager.py": "miles/ray/rollout/router_manager.py",
    "slime/backends/megatron_utils/update_weight/update_weight_from_distributed.py": (
        "miles/backends/megatron_utils/update_weight/update_weight_from_distributed/broadcast.py"
    ),
    # slime main moved these to slime/observability/ (624b824); miles keeps them in utils/
    "slime/observability/timer.py": "miles/utils/timer.py",
    "slime/observability/logging_utils.py": "miles/utils/logging_utils.py",
}
# Files of slime main's features that miles does not have (radixark/miles@31f1ca961): the miles
# job carries them so that it imports, but no recorded miles run goes through them (disk weight
# sync, server_control's abort tail).
MILES_LACKS = (
    "miles/ray/serving.py",  # slime's next layout's ServingCluster (run with --serving-cluster)
    "miles/backends/megatron_utils/hf_checkpoint_saver.py",
    "miles/backends/megatron_utils/update_weight/update_weight_from_disk.py",
    "miles/backends/sglang_utils/server_control.py",
)
# the folder this package is imported from (its distribution folder, or site-packages): on the
# job's PYTHONPATH, where the job's engines import the SGLang stand-in
IMPORT_ROOT = Path(__file__).resolve().parents[1]
MARKER_ENV = "SLIME_HANGDOCTOR_DEMO"
ARMED_TEXT = "DEMO FAULT ARMED"
PLAN_MISSED_TEXT = "DEMO FAULT PLAN MISSED"  # a timed fault went live too early
SETTLE_S = 2.5  # after the armed line: let the faulty call reach its blocking point
# engine_paused_by_update: the pause comes 1 s after the armed sync; the next rollout then runs on
# the healthy engine, whose idle keep-alive connections the server closes after 5 s
# rollout_slots_leaked: the stuck generate must outlast 5x its earlier runs (Ray task history;
# the first rollout imports the reward code and may take seconds)
# rollout_data_plasma_full: the dashboard refreshes the raylets' object-store readings of its node
# summary every 15 s (Ray's NODE_STATS_UPDATE_INTERVAL_SECONDS): one refresh after the hang
SETTLE_S_BY_FAULT = {
    "engine_paused_by_update": 9.0,
    "rollout_slots_leaked": 20.0,
    "rollout_data_plasma_full": 16.0,
    # update_waits_behind_rollout_gate: the gate closes while rollout 0 still trains; the update's
    # calls reach the RolloutManager's queue after the step and the first sync's barrier
    "update_waits_behind_rollout_gate": 6.0,
    # startup_tp_rank_killed: no server to connect to; its ranks start (and one dies) meanwhile
    "startup_tp_rank_killed": 15.0,
}
STARTUP_SETTLE_S = 5.0  # start-up faults: a few /health_generate polls
HEALTHY_STEPS = {
    "none": 3,
    "slow": 1,
    "disk_weight_sync": 2,
}  # train steps a healthy run shows before it is "ready"
# What the job's processes import beyond Ray (dependencies of this distribution, demo/pyproject.toml;
# looked up before any Ray process starts, for an environment that installed it without them).
JOB_MODULES = ("torch", "numpy", "setproctitle")

_STEP_RE = re.compile(r"\bstep (\d+): \{'train/loss'")
_ACTOR_PID_RE = re.compile(r"\((\w+) pid=(\d+)(?:, ip=[^)]*)?\)")
_ENGINE_PORT_RE = re.compile(r"Ports for engine (\d+): \{'host': '([^']+)', 'port': (\d+)")
_ENGINE_LAUNCH_RE = re.compile(
    r"\(SGLangEngine pid=(\d+)[^)]*\).*Launch HttpServerEngineAdapter at: ([\d.]+):(\d+)"
)
_RANK_RE = re.compile(
    r"\((?:Megatron|FSDP)TrainRayActor pid=(\d+)[^)]*\).*\[Rank (\d+)\] joined the train"
)
_ENGINE_UP_TEXT = "The server is fired up and ready to roll"
_ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")
_RAY_PREFIX_RE = re.compile(r"^\(\w+ pid=\d+(?:, ip=[^)]*)?\) ?")
# A line that reports a failure: an exception's own line (`ModuleNotFoundError: ...`), a "failed" /
# "fatal" message, an HTTP 4xx/5xx answer in an access log. Traceback frames (indented) are not.
_ERROR_LINE_RE = re.compile(
    r"\w*(?:Error|Exception)\b|\b(?:failed|fatal)\b|\bHTTP/[\d.]+\" [45]\d\d\b", re.IGNORECASE
)
ERROR_LINES = 6  # first distinct error lines a failed demo shows
TAIL_LINES = 12  # the log's last lines, when it holds no error line


class DemoError(RuntimeError):
    """The demo job failed, or did not reach the expected state in time (the message says why in
    plain words: the first error lines of the job's log)."""


def error_lines(logs: str, limit: int = ERROR_LINES) -> list[str]:
    """The first `limit` distinct lines of a job log that report an error, colour codes removed;
    a line repeated by several processes (numbers aside) is shown once, with its count."""
    first: dict[str, int] = {}
    shown: list[str] = []
    counts: list[int] = []
    for raw in logs.splitlines():
        line = _ANSI_RE.sub("", raw).rstrip()
        body = _RAY_PREFIX_RE.sub("", line)
        if not body or body[0].isspace() or not _ERROR_LINE_RE.search(body):
            continue
        key = re.sub(r"\d+", "#", body)
        if key in first:
            counts[first[key]] += 1
            continue
        if len(shown) == limit:
            continue
        first[key] = len(shown)
        shown.append(line)
        counts.append(1)
    return [line if n == 1 else f"{line}  (x{n})" for line, n in zip(shown, counts, strict=True)]


def _log_tail(logs: str, lines: int = TAIL_LINES) -> list[str]:
    return [_ANSI_RE.sub("", line).rstrip() for line in logs.splitlines()[-lines:]]


@dataclass
class DemoRun:
    """A running demo: the Ray head, the job, and what the job logged about itself."""

    fault: FaultSpec
    head: cluster.RayHead
    submission_id: str
    workdir: Path
    fault_after_steps: int
    owns_head: bool = True
    # the nodes each engine runs on (slime: --rollout-num-gpus-per-engine over --num-gpus-per-node):
    # one SGLangEngine actor per node, consecutive ranks, node rank 0 the engine's HTTP side
    nodes_per_engine: int = 1
    started_at: float = field(default_factory=time.monotonic)
    armed_after_s: float | None = None
    ready_after_s: float | None = None
    _stopped: bool = False

    # ---- the job's log
    def logs(self) -> str:
        return cluster.job_logs(self.head, self.submission_id)

    def status(self) -> str:
        return str(cluster.job_info(self.head, self.submission_id).get("status"))

    def steps_done(self, logs: str | None = None) -> int:
        """How many train steps rank 0 has logged (`step N: {...}` lines)."""
        return len(_STEP_RE.findall(self.logs() if logs is None else logs))

    def armed(self, logs: str | None = None) -> bool:
        return ARMED_TEXT in (self.logs() if logs is None else logs)

    def driver_pid(self) -> int | None:
        info = cluster.job_info(self.head, self.submission_id).get("driver_info") or {}
        pid = info.get("pid")
        return int(pid) if pid else None

    def roles(self) -> dict[str, int]:
        """Process label -> pid, from the job's log: "driver", "rollout_manager",
        "train rank N", "engine N actor" (see faults.py for the labels)."""
        logs = self.logs()
        out: dict[str, int] = {}
        driver = self.driver_pid()
        if driver:
            out["driver"] = driver
        for cls, pid in _ACTOR_PID_RE.findall(logs):
            if cls == "RolloutManager":
                out["rollout_manager"] = int(pid)
            elif cls == "ServingCluster":  # slime's next layout: it starts router and engines
                out["serving_cluster"] = int(pid)
        for pid, rank in _RANK_RE.findall(logs):
            out[f"train rank {rank}"] = int(pid)
        port_to_actor = {int(port): int(i) for i, _host, port in _ENGINE_PORT_RE.findall(logs)}
        for pid, _host, port in _ENGINE_LAUNCH_RE.findall(logs):
            if int(port) in port_to_actor:
                out[f"{self._engine_label(port_to_actor[int(port)])} actor"] = int(pid)
        return out

    def _engine_label(self, actor_rank: int) -> str:
        """`engine N` for the actor of an engine's node rank 0, `engine N node<k>` for its node
        rank k (an engine on several nodes has one actor per node, consecutive ranks)."""
        engine, node = divmod(actor_rank, self.nodes_per_engine)
        return f"engine {engine}" if node == 0 else f"engine {engine} node{node}"

    def processes(self) -> dict[str, int]:
        """`roles()` plus each engine's server ("engine N server", the actor's spawn child) and
        its scheduler ("engine N scheduler", cmdline starting with `sglang::scheduler`; with
        several TP ranks that is TP rank 0's, and rank r > 0 is "engine N scheduler TPr"), its
        detokenizer ("engine N detokenizer", `sglang::detokenizer`), and the router ("router", the
        forked child, a live one, of the actor that starts it: the RolloutManager, or the
        ServingCluster in slime's next layout), and miles's session server ("session server",
        the RolloutManager's spawned child titled `miles-session-server`) where the job runs one."""
        import psutil

        out = self.roles()
        owner = out.get("serving_cluster") or out.get("rollout_manager")
        if owner is not None:
            try:
                children = psutil.Process(owner).children()
                children.sort(key=lambda c: c.create_time())
            except psutil.Error:
                children = []
            # the router is the first child (forked in the constructor); later ones are the
            # processes of a pool of the RolloutManager's ("rollout_manager child N")
            for i, child in enumerate(children):
                try:
                    if child.status() == psutil.STATUS_ZOMBIE:
                        continue
                    session = child.cmdline()[:1] == ["miles-session-server"]
                except (psutil.Error, IndexError):
                    continue
                if session:
                    out["session server"] = child.pid
                else:
                    out["router" if i == 0 else f"rollout_manager child {i}"] = child.pid
        for label, pid in list(out.items()):
            if not label.endswith(" actor"):
                continue
            engine = label.removesuffix(" actor")
            base = engine.split(" node", 1)[0]  # a rank's label names its engine, not its node
            try:
                children = psutil.Process(pid).children(recursive=True)
            except psutil.Error:
                continue
            for child in children:
                try:
                    cmd = child.cmdline()
                except psutil.Error:
                    continue
                if cmd and cmd[0].startswith("sglang::scheduler"):
                    rank = cmd[0].rsplit("_TP", 1)[-1] if "_TP" in cmd[0] else "0"
                    suffix = "" if rank == "0" else f" TP{rank}"
                    out[f"{base} scheduler{suffix}"] = child.pid
                elif cmd and cmd[0] == "sglang::detokenizer":
                    out[f"{engine} detokenizer"] = child.pid
                elif any("spawn_main" in part for part in cmd):
                    out[f"{engine} server"] = child.pid
        return out

    def engine_urls(self) -> dict[int, str]:
        """Engine number -> its URL (node rank 0's server: the only one with SGLang's API)."""
        return {
            int(i) // self.nodes_per_engine: f"http://{host}:{port}"
            for i, host, port in _ENGINE_PORT_RE.findall(self.logs())
            if int(i) % self.nodes_per_engine == 0
        }

    def _engines_listening(self, logs: str) -> bool:
        """Every engine's server accepts TCP connections (a connect, no request): a start-up fault
        is in place only once its server is up (a slow machine takes seconds to spawn it)."""
        import socket

        found = _ENGINE_PORT_RE.findall(logs)
        if not found:
            return False
        for _i, host, port in found:
            try:
                socket.create_connection((host, int(port)), timeout=0.5).close()
            except OSError:
                return False
        return True

    # ---- waiting
    def stage(self, logs: str) -> str:
        """What the job's start-up is waiting for now, in words (the demo's progress line)."""
        spec = self.fault
        steps = self.steps_done(logs)
        if self.armed(logs):
            return f"fault {spec.name} armed; letting the job reach its blocking call"
        if steps:
            if spec.expected.status != "hung":
                return f"training: step {steps} of {HEALTHY_STEPS.get(spec.name, 3)}"
            return f"training: step {steps}; waiting for the fault {spec.name} to arm"
        if "Running entrypoint" not in logs:
            return "waiting for Ray to start the job's driver"
        engines = len(_ENGINE_PORT_RE.findall(logs)) // self.nodes_per_engine
        if not engines:
            return "the job's driver is creating its placement group and rollout manager"
        waiting = []
        up = logs.count(_ENGINE_UP_TEXT)
        if up < engines:
            waiting.append(f"SGLang engines to start ({up} of {engines} up)")
        ranks = len(_RANK_RE.findall(logs))
        waiting.append(
            f"the first train step (training ranks up: {ranks})"
            if ranks
            else "the training ranks to start"
        )
        return "waiting for " + " and ".join(waiting)

    def failure(self, what: str, logs: str) -> DemoError:
        """A DemoError that says in plain words why: `what`, then the first error lines of the
        job's log (else its last lines), and where the whole log was saved."""
        found = error_lines(logs)
        lines = found or _log_tail(logs)
        head = "first errors in the job's log:" if found else "last lines of the job's log:"
        saved = self.workdir / "job.log"
        try:
            saved.write_text(logs, encoding="utf-8")
            where = f"the job's whole log: {saved}"
        except OSError as exc:
            where = f"(the job's log could not be saved to {saved}: {exc.strerror})"
        body = "\n".join(f"  {line}" for line in lines) or "  (the log is empty)"
        return DemoError(f"{what}; {head}\n{body}\n{where}")

    def wait_until_ready(
        self, timeout: float = 90.0, progress: Callable[[str], None] | None = None
    ) -> None:
        """Return once the job has reached its fault (or run a few healthy steps); DemoError when
        the job ends or `timeout` passes first (the message carries the log's first error lines).
        `progress` is told what the start-up waits for, with the seconds since submission."""
        deadline = time.monotonic() + timeout
        spec = self.fault
        while True:
            logs = self.logs()
            if progress is not None:
                progress(f"{self.stage(logs)} ({time.monotonic() - self.started_at:.0f} s)")
            if spec.expected.status != "hung" and spec.name in HEALTHY_STEPS:
                if self.steps_done(logs) >= HEALTHY_STEPS[spec.name]:
                    break
            elif spec.expected.stage == "startup" and spec.server_fault is not None:
                # an engine start-up fault is ready once its engines are launched and listening
                if (
                    "demo fault plan for engine" in logs
                    and "Launch HttpServerEngineAdapter" in logs
                    and (not spec.engine_listens or self._engines_listening(logs))
                ):
                    if self.armed_after_s is None:
                        self.armed_after_s = time.monotonic() - self.started_at
                    settle = SETTLE_S_BY_FAULT.get(spec.name, STARTUP_SETTLE_S)
                    if time.monotonic() - self.started_at >= self.armed_after_s + settle:
                        break
            elif self.armed(logs):
                if self.armed_after_s is None:
                    self.armed_after_s = time.monotonic() - self.started_at
                settle = SETTLE_S_BY_FAULT.get(spec.name, SETTLE_S)
                if time.monotonic() - self.started_at >= self.armed_after_s + settle:
                    break
            if PLAN_MISSED_TEXT in logs:
                raise self.failure(f"the demo fault {spec.name} went live too early", logs)
            status = self.status()
            if status in cluster.TERMINAL_JOB_STATES:
                raise self.failure(f"the demo job ended ({status}) before it was ready", logs)
            if time.monotonic() >= deadline:
                raise self.failure(
                    f"the demo job did not reach its fault {spec.name} within {timeout:.0f} s "
                    f"(last: {self.stage(logs)})",
                    logs,
                )
            time.sleep(0.5)
        self.ready_after_s = time.monotonic() - self.started_at

    # ---- stopping
    def stop(self) -> None:
        """Stop the job, the head, and every process the demo started (idempotent)."""
        if self._stopped:
            return
        self._stopped = True
        pids = marked_pids(self.submission_id)
        if self.owns_head:
            pids |= self.head.pids()
        try:
            cluster.stop_job(self.head, self.submission_id)
        except Exception:
            pass
        if self.owns_head:
            self.head.stop(timeout=5.0)
        else:
            _wait_job_ended(self, timeout=10.0)
        _kill(pids | marked_pids(self.submission_id), timeout=3.0)

    def __enter__(self) -> DemoRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _wait_job_ended(run: DemoRun, *, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if run.status() in cluster.TERMINAL_JOB_STATES:
                return
        except cluster.ClusterError:
            return
        time.sleep(0.25)


def marked_pids(demo_id: str) -> set[int]:
    """Live processes whose environment carries this demo's marker."""
    import psutil

    needle = f"{MARKER_ENV}={demo_id}".encode()
    found: set[int] = set()
    for proc in psutil.process_iter(["pid"]):
        try:
            with open(f"/proc/{proc.info['pid']}/environ", "rb") as fh:
                if needle in fh.read():
                    found.add(proc.info["pid"])
        except OSError:
            continue
    return found


def _kill(pids: set[int], *, timeout: float) -> None:
    """SIGTERM `pids`, then SIGKILL whatever is left after `timeout`."""
    import psutil

    procs = []
    for pid in pids:
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            continue
    for proc in procs:
        try:
            proc.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=3.0)


def missing_modules() -> list[str]:
    """The JOB_MODULES this Python cannot import (looked up, not imported: torch takes seconds)."""
    import importlib.util

    return [name for name in JOB_MODULES if importlib.util.find_spec(name) is None]


def job_layout(spec: FaultSpec, layout: str | None) -> str:
    """The layout the demo job of `spec` runs as: `layout` (one of JOB_LAYOUTS), or the fault's
    own, else slime. DemoError for a layout that is unknown or that the fault cannot run on."""
    if layout is not None and layout not in JOB_LAYOUTS:
        raise DemoError(f"unknown demo job layout {layout!r} (known: {', '.join(JOB_LAYOUTS)})")
    if layout is None:
        return spec.layout or "slime"
    if spec.layout is not None and layout != spec.layout:
        raise DemoError(
            f"demo fault {spec.name!r} runs on the {spec.layout} layout only "
            f"(--layout {spec.layout}), not on {layout}"
        )
    return layout


def job_entrypoint(fault: str, fault_after_steps: int, extra_args: list[str] | None = None) -> str:
    argv = [
        sys.executable,
        get_fault(fault).entrypoint,
        "--fault",
        fault,
        "--fault-after-steps",
        str(fault_after_steps),
        *(extra_args or []),
    ]
    return shlex.join(argv)


def _module(path: str) -> str:
    return path.removesuffix(".py").replace("/", ".")


def miles_job(dest: Path, job: Path = JOB_DIR) -> Path:
    """The demo job laid out as miles: a copy of `job` under `dest` with the `slime` package
    renamed `miles`, the files of MILES_MOVES moved where miles has them, and every module path
    in the Python sources (`slime.x`, the moved modules) rewritten to match. Returns `dest`."""
    shutil.copytree(job, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (dest / "slime").rename(dest / "miles")
    moves = {_module(a): _module(b) for a, b in MILES_MOVES.items()}
    for old, new in MILES_MOVES.items():
        target = dest / new
        target.parent.mkdir(parents=True, exist_ok=True)
        init = target.parent / "__init__.py"
        if not init.exists():
            init.write_text("")
        (dest / "miles" / old.removeprefix("slime/")).rename(target)
    observability = dest / "miles" / "observability"
    if sorted(p.name for p in observability.iterdir()) == ["__init__.py"]:
        shutil.rmtree(observability)  # emptied by the moves: miles has no such package
    for path in dest.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        for old_mod, new_mod in moves.items():
            text = re.sub(rf"\b{re.escape(old_mod)}\b(?![.\w])", new_mod, text)
        path.write_text(re.sub(r"\bslime\.(?=[A-Za-z_])", "miles.", text), encoding="utf-8")
    return dest


def tp_size_of(spec: FaultSpec, tp_size: int | None) -> int:
    """The TP ranks per engine of a run of `spec`: `tp_size`, else the fault's own; DemoError for
    less than 1, or for less than 2 where the fault lives in the TP group (its own is > 1)."""
    tp = spec.tp_size if tp_size is None else tp_size
    if tp < 1:
        raise DemoError(f"tp size must be at least 1, not {tp}")
    if spec.tp_size > 1 and tp < 2:
        raise DemoError(
            f"demo fault {spec.name!r} lives between the TP ranks of an engine: it needs --tp 2 "
            f"or more (its own: {spec.tp_size})"
        )
    return tp


def start_demo(
    fault: str,
    *,
    workdir: Path,
    fault_after_steps: int = 0,
    extra_args: list[str] | None = None,
    extra_env: dict[str, str] | None = None,
    num_cpus: int = 2,
    head: cluster.RayHead | None = None,
    layout: str | None = None,
    tp_size: int | None = None,
    tp_nodes: int = 1,
) -> DemoRun:
    """Start a Ray head (or use `head`, which then outlives the run) and submit the demo job with
    `fault`; returns at once (see `DemoRun.wait_until_ready`). On any failure everything started
    so far is stopped. `layout`: one of JOB_LAYOUTS (`miles`: the job as `miles_job` lays it out,
    under `workdir`; None: the fault's own, else `slime`). `tp_size`: TP ranks per engine (None:
    the fault's own, 1 for most), as slime's `--rollout-num-gpus-per-engine`, with as many engines
    as at one rank each. `tp_nodes`: the nodes each engine's TP ranks spread over (slime's
    multi-node engines: `--num-gpus-per-node` tp/tp_nodes, one SGLangEngine actor per node); the
    job's `--rollout-node-resource` (in `extra_args`) then names one resource per node,
    comma-separated."""
    spec = get_fault(fault)
    layout = job_layout(spec, layout)
    tp = tp_size_of(spec, tp_size)
    if tp_nodes < 1 or tp % tp_nodes:
        raise DemoError(f"{tp} TP ranks do not spread evenly over {tp_nodes} nodes")
    missing = missing_modules()
    if missing:
        raise DemoError(
            f"the demo job needs {', '.join(missing)} in this Python environment "
            f"({sys.executable}), which lacks them"
        )
    if not server_fault_supported(spec):
        raise DemoError(
            f"demo fault {fault!r} needs the SGLang stand-in fault {spec.server_fault!r}, "
            "which slime_hangdoctor_demo.sglang_server does not offer"
        )
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    request_logs = workdir / "sglang"
    request_logs.mkdir(exist_ok=True)
    submission_id = f"slime-demo-{fault.replace('_', '-')}-{uuid.uuid4().hex[:8]}"
    job_dir = JOB_DIR if layout != "miles" else miles_job(workdir / f"job-{submission_id}")
    env = {
        MARKER_ENV: submission_id,
        "PYTHONPATH": str(IMPORT_ROOT),
        "RAY_DEDUP_LOGS": "0",
        "PYTHONUNBUFFERED": "1",
        "GLOO_SOCKET_IFNAME": "lo",
        "OMP_NUM_THREADS": "1",
        **(extra_env or {}),  # the job's runtime_env env_vars (W&B, HF, proxies...)
    }
    owns_head = head is None
    if head is None:
        head = cluster.start_head(
            workdir, num_cpus=num_cpus, object_store_mib=spec.object_store_mib
        )
    run = DemoRun(
        fault=spec,
        head=head,
        owns_head=owns_head,
        submission_id=submission_id,
        workdir=workdir,
        fault_after_steps=fault_after_steps,
        nodes_per_engine=tp_nodes,
    )
    try:
        args = ["--sglang-request-log-dir", str(request_logs), *LAYOUT_ARGS.get(layout, ())]
        args += extra_args or []
        if spec.remote_reward:
            (rm_port,) = cluster.free_ports(1)
            args += ["--rm-type", "remote_rm", "--rm-url", f"http://127.0.0.1:{rm_port}/score"]
        if tp > 1:
            args += ["--rollout-num-gpus", str(2 * tp), "--rollout-num-gpus-per-engine", str(tp)]
            per_node = tp // tp_nodes if tp_nodes > 1 else max(2, tp)
            args += ["--num-gpus-per-node", str(per_node)]
        if "--sglang-base-port" not in args:
            # slime counts engine ports up from 15000; two demos on one box would race for the
            # same ports, so each run starts from a free block of its own (cluster.quiet_port_block)
            args += ["--sglang-base-port", str(cluster.quiet_port_block())]
        run.started_at = time.monotonic()
        cluster.submit_job(
            head,
            job_entrypoint(fault, fault_after_steps, args),
            working_dir=job_dir,
            submission_id=submission_id,
            env=env,
        )
    except BaseException:
        run.stop()
        raise
    return run
