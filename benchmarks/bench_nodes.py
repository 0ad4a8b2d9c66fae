"""Multi-node collection cost (issue 6): 2-node vs 1-node attach, and fan-out time against node count.

1. **Ratio.** A real two-node cluster on this machine (head + `ray start --address` at 127.0.0.2). The
   demo job runs with the same processes twice: all on the head (1 node), then with the engines pinned
   to the second node (2 nodes, reached through a pinned Ray task). `attach` wall time, median of
   `ROUNDS` runs each; the target is 2-node <= 1.5 x 1-node.
2. **Curve.** Node-local sampling fanned out to N nodes at once, N = 1, 2, 4, 8, 16. Real nodes do not fit
   on a 2-core machine beyond two, so the N "nodes" are N pinned tasks sent to the one real remote node:
   the same fan-out, scheduling, transfer and gather path a cluster of N nodes takes. Three series:
   - `full`: each task samples that node's slime processes in full (processes, py-spy of each, RAS).
     All N share two cores here (on a cluster each node has its own), so this series measures CPU
     contention of the simulation, an upper bound;
   - `waiting`: each task's node-local work is latency-bound (its RAS probe meets a port that accepts
     and never answers, 1 s timeout; no CPU work): flat if and only if the fan-out is parallel;
   - `overhead`: each task only scans processes: the cost of fanning out and gathering itself.

    python -m benchmarks.bench_nodes            # prints JSON, writes benchmarks/results/nodes.json
"""

from __future__ import annotations

import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from slime_hangdoctor.collect.node import NodeSpec, partial_snapshot, pids_by_node
from slime_hangdoctor.collect.options import CollectOptions, Deadline
from slime_hangdoctor.collect.remote import RayTasks, RemoteNode, collect_remote, gather_remote
from slime_hangdoctor_demo import cluster
from slime_hangdoctor_demo.launch import start_demo

ROUNDS = 5
FANOUT = (1, 2, 4, 8, 16)
NODE2_IP = "127.0.0.2"
SPREAD = [
    "--actor-node-resource",
    "node:__internal_head__",
    "--rollout-node-resource",
    "rollout_node",
]
RESULTS = Path(__file__).parent / "results" / "nodes.json"


def _attach_wall(address: str) -> float:
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "slime_hangdoctor", "attach", address, "--json", "--window", "3"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    wall = time.monotonic() - t0
    verdict = json.loads(proc.stdout)
    assert verdict["status"] == "hung", verdict["summary"]
    return wall


def _ratio(head: cluster.RayHead, work: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for label, extra in (("one_node", []), ("two_nodes", SPREAD)):
        run = start_demo("rollout_engine_stuck", workdir=work / label, head=head, extra_args=extra)
        try:
            run.wait_until_ready(timeout=180)
            walls = [_attach_wall(head.dashboard_url) for _ in range(ROUNDS)]
        finally:
            run.stop()
        out[label] = {"median_s": statistics.median(walls), "runs_s": [round(w, 3) for w in walls]}
    out["ratio"] = out["two_nodes"]["median_s"] / out["one_node"]["median_s"]
    return out


def _fanout(head: cluster.RayHead, work: Path) -> dict[str, Any]:
    from slime_hangdoctor.bundle import BundleWriter
    from slime_hangdoctor.collect.dashboard import DashboardClient, capture_state

    run = start_demo("rollout_engine_stuck", workdir=work / "fanout", head=head, extra_args=SPREAD)
    curve: dict[str, Any] = {}
    try:
        run.wait_until_ready(timeout=180)
        with tempfile.TemporaryDirectory() as tmp:
            probe = BundleWriter(Path(tmp) / "state", command="bench")
            capture_state(probe, DashboardClient(head.dashboard_url, timeout=5.0), sample=0)
            state = partial_snapshot(probe)
        node = next(n for n in state.nodes if n.node_ip == NODE2_IP)
        pids = frozenset(pids_by_node(state)[node.node_id])
        silent = socket.socket()
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)  # accepts (kernel backlog) and never answers
        series = {
            "full": (CollectOptions(), {}),
            "waiting": (
                CollectOptions(ras_port=silent.getsockname()[1], probe_timeout_s=1.0),
                {"stacks": False},
            ),
            "overhead": (CollectOptions(), {"stacks": False, "ras": False}),
        }
        tasks = RayTasks(head.gcs_address, timeout_s=30.0)
        try:
            assert tasks.ready(30.0) is None, tasks.ready(0.1)
            remote = RemoteNode(node.node_id, node.node_ip)
            for name, (opts, flags) in series.items():
                curve[name] = {str(n): _fan(tasks, remote, pids, opts, flags, n) for n in FANOUT}
        finally:
            tasks.close()
            silent.close()
    finally:
        run.stop()
    return curve


def _fan(
    tasks: RayTasks,
    remote: RemoteNode,
    pids: frozenset[int],
    opts: CollectOptions,
    flags: dict[str, bool],
    n: int,
) -> dict[str, Any]:
    from slime_hangdoctor.bundle import BundleWriter

    walls = []
    stacks = 0
    for _ in range(3):
        with tempfile.TemporaryDirectory() as tmp:
            writer = BundleWriter(Path(tmp) / "b", command="bench")
            deadline = Deadline(60.0)
            t0 = time.monotonic()
            specs = [(remote, NodeSpec(NODE2_IP, 0, pids, **flags)) for _ in range(n)]
            started = collect_remote(tasks, writer, specs, opts, deadline)
            failed = gather_remote(tasks, writer, started, 0, deadline, 30.0)
            walls.append(time.monotonic() - t0)
            assert not failed
            stacks = sum(1 for r in writer.records if r.source == "pyspy")
    return {
        "median_s": round(statistics.median(walls), 3),
        "runs_s": [round(w, 3) for w in walls],
        "stacks_per_round": stacks,
    }


def main() -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="bench-nodes-"))
    head = cluster.start_head(work, num_cpus=2)
    node: cluster.RayNodeProc | None = None
    try:
        # 16 logical CPUs: the raylet starts as many workers at once as it has CPUs, and N real nodes
        # would each start their one worker in parallel (the physical machine still has 2 cores).
        node = cluster.start_worker_node(
            head, work, resources={"rollout_node": 4}, num_cpus=16, node_ip_address=NODE2_IP
        )
        only = sys.argv[1:]
        result: dict[str, Any] = {}
        if not only or "ratio" in only:
            result["ratio"] = _ratio(head, work)
        if not only or "fanout" in only:
            result["fanout"] = _fanout(head, work)
    finally:
        if node is not None:
            node.stop()
        head.stop()
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    print(json.dumps(main(), indent=1))
