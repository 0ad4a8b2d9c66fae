"""The doctor's Ray driver alone, A/B (issue 43 item 1): in the doctor's process (a thread, before)
or in a process of its own (after), on a real two-node cluster on this machine.

Each round runs, for each tree in turn (a checkout or `git archive` of another commit, imported
through PYTHONPATH), a fresh interpreter that does what `attach` does with its driver: start it
(`remote.RayTasks(gcs)`: a connect thread before, a process now), wait until it is connected, ask
the second node's probe for a sample (its process scan and node probes, `collect_remote` then
`gather_remote`) and close it. Timed from just before `RayTasks(...)`: `connected_s`, `answered_s`
(connected to the node's first answer: the probe's creation and its sample), `total_s`; and the
CPU of the whole process tree (its own and its reaped children's: the driver's process after).

    python -m benchmarks.bench_driver new=. base=/tmp/base [--rounds 6] [--save NAME]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.machine import load_snapshot
from benchmarks.measure import run_measured
from slime_hangdoctor_demo import cluster

NODE2_IP = "127.0.0.2"
RESULTS = Path(__file__).parent / "results"

ONE_RUN = """
import json, sys, time
t0 = time.monotonic()
from pathlib import Path
from slime_hangdoctor.bundle import BundleWriter
from slime_hangdoctor.collect.node_probe import NodeSpec
from slime_hangdoctor.collect.options import CollectOptions, Deadline
from slime_hangdoctor.collect.remote import RayTasks, RemoteNode, collect_remote, gather_remote
gcs, node_id, out = sys.argv[1], sys.argv[2], sys.argv[3]
t1 = time.monotonic()
tasks = RayTasks(gcs, timeout_s=60.0)
why = tasks.ready(60.0)
t2 = time.monotonic()
node = RemoteNode(node_id, "127.0.0.2")
writer = BundleWriter(Path(out), command="bench")
deadline = Deadline(60.0)
started = collect_remote(tasks, [(node, NodeSpec(node.node_ip, 0))], CollectOptions(), deadline)
failed = gather_remote(tasks, writer, started, 0, deadline, 50.0)
t3 = time.monotonic()
tasks.close()
t4 = time.monotonic()
print(json.dumps({"imports_s": t1 - t0, "connected_s": t2 - t1, "answered_s": t3 - t2,
                  "closed_s": t4 - t3, "total_s": t4 - t1, "why": why, "failed": len(failed),
                  "records": sum(1 for r in writer.records if r.node_ip == node.node_ip)}))
"""


def _one(tree: Path, gcs: str, node_id: str, out: Path) -> dict[str, Any]:
    run = run_measured(
        [sys.executable, "-c", ONE_RUN, gcs, node_id, str(out)],
        timeout=180,
        env={"PYTHONPATH": f"{tree}{os.pathsep}{tree / 'demo'}", "RAY_ADDRESS": None},
        cwd=str(tree),
    )
    doc: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
    doc["cpu_s"] = run.cpu_user_s + run.cpu_sys_s
    doc["wall_s"] = run.wall_s
    return doc


def main() -> dict[str, Any]:
    parser = argparse.ArgumentParser()
    parser.add_argument("trees", nargs="+", help="NAME=PATH of each tree")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--save", default="")
    args = parser.parse_args()
    trees = {n: Path(p).resolve() for n, _, p in (t.partition("=") for t in args.trees)}
    work = Path(tempfile.mkdtemp(prefix="bench-driver-"))
    head = cluster.start_head(work, num_cpus=2)
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in trees}
    result: dict[str, Any] = {
        "load_at_start": load_snapshot(),
        "trees": {n: str(p) for n, p in trees.items()},
    }
    try:
        node = cluster.start_worker_node(
            head, work, resources={"rollout_node": 4}, num_cpus=2, node_ip_address=NODE2_IP
        )
        try:
            (node_id,) = [
                str(n["node_id"])
                for n in cluster.list_nodes(head)
                if n.get("node_ip") == NODE2_IP and n.get("state") == "ALIVE"
            ]
            for i in range(args.rounds + 1):  # the first round warms the caches and the node
                for name, tree in trees.items():
                    doc = _one(tree, head.gcs_address, node_id, work / f"{name}-{i}")
                    print(name, i, json.dumps(doc), file=sys.stderr, flush=True)
                    if i:
                        runs[name].append(doc)
        finally:
            node.stop()
    finally:
        head.stop()
    keys = ("connected_s", "answered_s", "total_s", "closed_s", "cpu_s", "wall_s")
    result["medians"] = {
        n: {k: round(statistics.median(r[k] for r in rs), 3) for k in keys}
        for n, rs in runs.items()
    }
    result["worst"] = {
        n: {k: round(max(r[k] for r in rs), 3) for k in keys} for n, rs in runs.items()
    }
    result["runs"] = runs
    result["load_at_end"] = load_snapshot()
    if args.save:
        (RESULTS / f"{args.save}.json").write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    print(json.dumps(main()["medians"], indent=1))
