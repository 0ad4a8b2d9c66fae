"""The multi-node cost on real raylets (issue 36), for a machine with many cores (a lent device).

A Ray head and NODES worker nodes on one machine, each worker node's raylet in its own PID (and
mount) namespace (`unshare --pid --fork --mount-proc`, `ray start --block` as the namespace's
first process, so it sees only its own processes, as a node of its own would) at its own loopback
address (127.0.0.2, ...). A slime-shaped job: the driver, a RolloutManager and two
MegatronTrainRayActor ranks on the head, one SGLangEngine actor per worker node (each with two
children titled as SGLang titles its scheduler and detokenizer), every one blocked in a method.

1. `attach` with the GCS address and with the dashboard URL, alternately, ROUNDS runs each after
   one warm-up: wall time minus the window (median, worst), and how many nodes' processes the
   bundle holds (every node inspected, none a blind spot). With `--trees NAME=PATH,...`, the CLI
   of each tree in turn (an A/B on a quiet many-core machine).
2. The fan-out over real nodes: the doctor's probes on the first N worker nodes (N = 1, 2, 4,
   ..., NODES), per round as `attach` does: connect, create the N probes and take the first
   sample, then the second sample from the same probes.
3. The same job with every actor on the head (one node), `attach` as in 1, also with no address
   (the local cluster, through `RAY_TMPDIR`).

    python -m benchmarks.device_nodes [--nodes 8] [--rounds 5] [--trees new=.,base=/tmp/base]
        [--out DIR]   # JSON to DIR/device_nodes.json, written after each part

Needs root (namespaces) and Ray, py-spy, psutil and setproctitle in this Python.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

WINDOW_S = 3.0

JOB = r"""
import subprocess, sys, threading, time
import ray

CHILD = ("import setproctitle, time; setproctitle.setproctitle(sys.argv[1]); time.sleep(3600)")

@ray.remote(num_cpus=0)
class SGLangEngine:
    def __init__(self):
        self.children = [
            subprocess.Popen([sys.executable, "-c", "import sys; " + CHILD, title])
            for title in ("sglang::scheduler_TP0", "sglang::detokenizer")
        ]
        self.ev = threading.Event()
    def generate(self):
        self.ev.wait()

@ray.remote(num_cpus=0)
class RolloutManager:
    def __init__(self):
        self.ev = threading.Event()
    def generate(self, rollout_id):
        self.ev.wait()

@ray.remote(num_cpus=0)
class MegatronTrainRayActor:
    def __init__(self, rank):
        self.ev = threading.Event()
    def train(self, rollout_id):
        self.ev.wait()

ray.init(address="auto")
spread = int(sys.argv[1])
idx = [int(x) for x in sys.argv[2].split(",")]
HEAD = {"node:__internal_head__": 0.001}
engines = [
    SGLangEngine.options(resources={f"node{i}": 0.01} if spread else HEAD).remote()
    for i in idx
]
rm = RolloutManager.options(resources=HEAD).remote()
ranks = [MegatronTrainRayActor.options(resources=HEAD).remote(r) for r in range(2)]
open(sys.argv[3], "w").write(ray.get_runtime_context().get_job_id())
ray.get([rm.generate.remote(0), *[r.train.remote(0) for r in ranks], *[e.generate.remote() for e in engines]])
"""


def _ray(*args: str) -> list[str]:
    return [sys.executable, "-m", "ray.scripts.scripts", *args]


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 - our own dashboard
        return json.loads(resp.read())


def _alive_names(dashboard: str) -> set[str]:
    doc = _get(f"{dashboard}/api/v0/nodes?limit=200")
    return {n.get("node_ip") for n in doc["data"]["result"]["result"] if n.get("state") == "ALIVE"}


def _alive_nodes(dashboard: str) -> int:
    try:
        doc = _get(f"{dashboard}/api/v0/nodes?limit=200")
    except OSError:
        return 0
    return sum(1 for n in doc["data"]["result"]["result"] if n.get("state") == "ALIVE")


class Cluster:
    """The head (slime_hangdoctor_demo.cluster's: free ports, its own temp dir, stopped alone)
    and the worker nodes, each in its own PID namespace."""

    def __init__(self, nodes: int, work: Path) -> None:
        self.nodes = nodes
        self.work = work
        self.head: Any = None
        self.gcs = ""
        self.dashboard = ""
        self.workers: list[subprocess.Popen[bytes]] = []
        self.tmpdir = work

    def start(self) -> None:
        from slime_hangdoctor_demo import cluster

        self.head = cluster.start_head(self.work / "head", num_cpus=4, timeout=240)
        self.gcs, self.dashboard = self.head.gcs_address, self.head.dashboard_url
        self.tmpdir = self.head.owner_dir  # RAY_TMPDIR that finds it (its temp dir is <it>/ray)
        self.alive_idx = list(range(1, self.nodes + 1))
        for i in range(1, self.nodes + 1):
            log = open(self.work / f"node{i}.log", "wb")  # noqa: SIM115 - kept while it runs
            self.workers.append(
                subprocess.Popen(
                    [
                        "unshare",
                        "--pid",
                        "--fork",
                        "--mount-proc",
                        *_ray(
                            "start",
                            "--block",
                            f"--address={self.gcs}",
                            f"--node-ip-address=127.0.0.{i + 1}",
                            "--num-cpus=1",
                            "--num-gpus=0",
                            f'--resources={{"node{i}": 1}}',
                            f"--temp-dir={self.work / f'node{i}'}",
                            "--disable-usage-stats",
                        ),
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
            if i % 16 == 0 or i == self.nodes:  # in batches of 16: each batch alive first
                deadline = time.monotonic() + 120
                while _alive_nodes(self.dashboard) < i + 1 and time.monotonic() < deadline:
                    time.sleep(1)
                print(f"{_alive_nodes(self.dashboard)} alive after {i} started", flush=True)
        alive = _alive_names(self.dashboard)
        self.alive_idx = [i for i in range(1, self.nodes + 1) if f"127.0.0.{i + 1}" in alive]
        dead = [i for i in range(1, self.nodes + 1) if i not in self.alive_idx]
        if dead:
            print(f"dead nodes: {dead}", flush=True)
            for i in dead[:3]:
                print(
                    f"--- node{i}.log", (self.work / f"node{i}.log").read_text()[-1500:], flush=True
                )

    def stop(self) -> None:
        """Each worker node's `ray start --block` (the first process of its namespace: when it
        ends, the kernel ends the rest), then the head, by its own temp dir."""
        for proc in self.workers:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for proc in self.workers:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        if self.head is not None:
            self.head.stop()


def _job(cluster: Cluster, spread: bool, work: Path) -> subprocess.Popen[bytes]:
    script = work / "job.py"
    script.write_text(JOB)
    id_file = work / f"job-{int(spread)}.id"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(script),
            "1" if spread else "0",
            ",".join(map(str, cluster.alive_idx)),
            str(id_file),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "RAY_ADDRESS": cluster.gcs},
        start_new_session=True,
    )
    deadline = time.monotonic() + 180
    want = 3 + len(cluster.alive_idx)
    while True:
        job_id = id_file.read_text().strip() if id_file.exists() else ""
        running = _running_methods(cluster, job_id) if job_id else 0
        if running >= want:
            return proc
        if time.monotonic() > deadline or proc.poll() is not None:
            out = proc.stdout.read().decode() if proc.poll() is not None and proc.stdout else ""
            raise RuntimeError(f"the job did not start ({running}/{want} running): {out[-2000:]}")
        time.sleep(1)


def _running_methods(cluster: Cluster, job_id: str) -> int:
    """The job's actor methods RUNNING now (the job is ready when all of them are)."""
    try:
        doc = _get(
            f"{cluster.dashboard}/api/v0/tasks?limit=1000&filter_keys=state"
            "&filter_predicates=%3D&filter_values=RUNNING&filter_keys=job_id"
            f"&filter_predicates=%3D&filter_values={job_id}"
        )
    except OSError:
        return 0
    names = [t.get("name", "") for t in doc["data"]["result"]["result"]]
    return sum(1 for n in names if n.endswith((".generate", ".train")))


def _attach(tree: Path, address: str | None, out: Path, tmpdir: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), os.environ["PYTHONPATH"]])}
    env.pop("RAY_ADDRESS", None)
    if address is None:
        env["RAY_TMPDIR"] = str(tmpdir)
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "slime_hangdoctor", "attach", *([address] if address else [])]
        + ["--json", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
        cwd=str(tree),
    )
    wall = time.monotonic() - t0
    verdict = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}
    try:
        manifest = json.loads((out / "manifest.json").read_text())
    except OSError:
        manifest = {"probes": []}
    nodes = {
        p["node_ip"]
        for p in manifest["probes"]
        if p["source"] == "processes" and p["outcome"] == "ok" and p.get("node_ip")
    }
    blind = [b for b in verdict.get("blind_spots", []) if "not inspected" in b]
    if os.environ.get("OUT"):
        keep = Path(os.environ["OUT"]) / "manifests"
        keep.mkdir(parents=True, exist_ok=True)
        try:
            (keep / f"{out.name}.json").write_text((out / "manifest.json").read_text())
        except OSError:
            pass
    return {
        "over_s": round(wall - WINDOW_S, 3),
        "rc": proc.returncode,
        "status": verdict.get("status"),
        "nodes_inspected": len(nodes),
        "not_inspected": blind[:3],
        "stderr": proc.stderr[-500:] if proc.returncode not in (0, 1, 2) else "",
    }


def _attaches(
    cluster: Cluster,
    rounds: int,
    work: Path,
    label: str,
    trees: dict[str, Path],
    forms: tuple[str, ...],
) -> dict[str, Any]:
    addresses = {"gcs": cluster.gcs, "url": cluster.dashboard, "local": None}
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {(f, t): [] for f in forms for t in trees}
    for i in range(rounds + 1):  # the first round warms the caches
        for form in forms:
            for name, tree in trees.items():
                out = work / f"{label}-{form}-{name}-{i}"
                got = _attach(tree, addresses[form], out, cluster.tmpdir)
                print(f"{label} {form} {name} run {i}: {got}", flush=True)
                if i:
                    runs[form, name].append(got)
    result: dict[str, Any] = {}
    for (form, name), rs in runs.items():
        result.setdefault(form, {})[name] = {
            "over_window_median_s": round(statistics.median(r["over_s"] for r in rs), 3),
            "over_window_worst_s": round(max(r["over_s"] for r in rs), 3),
            "nodes_inspected": [r["nodes_inspected"] for r in rs],
            "runs": rs,
        }
    return result


def _fanout(cluster: Cluster, rounds: int) -> dict[str, Any]:
    from slime_hangdoctor.bundle import BundleWriter
    from slime_hangdoctor.collect.dashboard import DashboardClient, capture_state
    from slime_hangdoctor.collect.node import NodeSpec, partial_snapshot, pids_by_node
    from slime_hangdoctor.collect.options import CollectOptions, Deadline
    from slime_hangdoctor.collect.remote import RayTasks, RemoteNode, collect_remote, gather_remote
    from slime_hangdoctor.parsers.ray_state import RAY_STATE

    with tempfile.TemporaryDirectory() as tmp:
        probe = BundleWriter(Path(tmp) / "state", command="bench")
        capture_state(probe, DashboardClient(cluster.dashboard, timeout=10.0), sample=0)
        state = partial_snapshot(probe)
    by_node = pids_by_node(state)
    workers = sorted(
        (
            n
            for n in state.joined(RAY_STATE).nodes
            if n.node_ip != "127.0.0.1" and n.node_id in by_node
        ),
        key=lambda n: n.node_ip,
    )
    out: dict[str, Any] = {}
    sizes = [n for n in (1, 2, 4, 8, 16, 32, 64) if n <= len(workers)]
    for n in sizes:
        connect: list[float] = []
        first: list[float] = []
        second: list[float] = []
        for _ in range(rounds):
            t0 = time.monotonic()
            tasks = RayTasks(cluster.gcs, timeout_s=60.0)
            try:
                assert tasks.ready(60.0) is None, tasks.ready(0.1)
                connect.append(time.monotonic() - t0)
                nodes = [RemoteNode(w.node_id, w.node_ip) for w in workers[:n]]
                with tempfile.TemporaryDirectory() as tmp:
                    writer = BundleWriter(Path(tmp) / "b", command="bench")
                    for sample, into in ((0, first), (1, second)):
                        if sample:  # (as `attach`: each probe's window passes before the second)
                            time.sleep(CollectOptions().window_s)
                        deadline = Deadline(90.0)
                        t1 = time.monotonic()
                        specs = [
                            (nd, NodeSpec(nd.node_ip, sample, frozenset(by_node[nd.node_id])))
                            for nd in nodes
                        ]
                        started = collect_remote(tasks, specs, CollectOptions(), deadline)
                        failed = gather_remote(tasks, writer, started, sample, deadline, 60.0)
                        into.append(time.monotonic() - t1)
                        assert not failed, failed
            finally:
                tasks.close()
        out[str(n)] = {
            "connect_s": round(statistics.median(connect), 3),
            "first_median_s": round(statistics.median(first), 3),
            "second_median_s": round(statistics.median(second), 3),
            "first_runs_s": [round(x, 3) for x in first],
            "second_runs_s": [round(x, 3) for x in second],
        }
        print(f"fanout {n}: {out[str(n)]}", flush=True)
    return out


def _memory(cluster: Cluster) -> dict[str, Any]:
    import psutil

    per_node = []
    for proc in cluster.workers:
        try:
            procs = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
        except psutil.Error:
            continue
        rss = 0
        names = []
        for p in procs:
            try:
                rss += p.memory_info().rss
                names.append(p.name())
            except psutil.Error:
                pass
        per_node.append((rss, len(procs), names))
    vm = psutil.virtual_memory()
    rss = sorted(r for r, _, _ in per_node)
    return {
        "node_rss_mib_median": round(statistics.median(rss) / 2**20, 1) if rss else None,
        "node_rss_mib_max": round(max(rss) / 2**20, 1) if rss else None,
        "node_procs": per_node[0][1] if per_node else None,
        "node_proc_names": per_node[0][2] if per_node else None,
        "used_gib": round(vm.used / 2**30, 1),
        "total_gib": round(vm.total / 2**30, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--fan-rounds", type=int, default=3)
    parser.add_argument("--trees", default="new=.", help="NAME=PATH,... of the CLIs to time")
    parser.add_argument("--out", default=".")
    parser.add_argument("--parts", default="spread,fanout,one_node")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    trees = {
        name: Path(path).resolve()
        for name, _, path in (t.partition("=") for t in args.trees.split(",") if t)
    }
    work = Path(tempfile.mkdtemp(prefix="hd-dev-"))
    result: dict[str, Any] = {"nodes": args.nodes, "cpus": os.cpu_count(), "trees": list(trees)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    def save() -> None:
        result["load"] = os.getloadavg()
        (out / "device_nodes.json").write_text(json.dumps(result, indent=1))

    cluster = Cluster(args.nodes, work)
    try:
        t0 = time.monotonic()
        cluster.start()
        result["cluster_start_s"] = round(time.monotonic() - t0, 1)
        result["alive_worker_nodes"] = len(cluster.alive_idx)
        result["memory"] = _memory(cluster)
        print("memory", result["memory"], flush=True)
        save()
        job = _job(cluster, True, work)
        try:
            if "spread" in parts:
                two = ("gcs", "url")
                result["spread"] = _attaches(cluster, args.rounds, work, "spread", trees, two)
                save()
            if "fanout" in parts:
                result["fanout"] = _fanout(cluster, args.fan_rounds)
                save()
        finally:
            os.killpg(job.pid, signal.SIGKILL)
        if "one_node" in parts:
            time.sleep(3)
            job = _job(cluster, False, work)
            try:
                forms = ("gcs", "url", "local")
                result["one_node"] = _attaches(cluster, args.rounds, work, "one_node", trees, forms)
                save()
            finally:
                os.killpg(job.pid, signal.SIGKILL)
    finally:
        save()
        cluster.stop()
    print(json.dumps({k: v for k, v in result.items() if k != "spread"}, indent=1)[:4000])


if __name__ == "__main__":
    main()
