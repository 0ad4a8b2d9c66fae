"""Multi-node collection cost (issues 6 and 36): time to verdict on one and on two nodes, and the
fan-out of node samples against node count.

1. **Two nodes.** A real two-node cluster on this machine (head + `ray start --address` at
   127.0.0.2). The demo job (`rollout_engine_stuck`) runs with the same processes three ways: all
   on the head (one node), the engines pinned to the second node, the train ranks pinned to the
   second node (two nodes: reached through the doctor's probe on that node). `attach ADDRESS
   --json` for each address form (the GCS, the dashboard's URL), the forms alternately, ROUNDS
   runs each: wall time minus the window (median, worst), and the second node's own records.
2. **Fan-out.** Node samples fanned out to N nodes at once, N = 1, 2, 4, 8, 16. Real nodes do not
   fit on a 2-core machine beyond two, so the N "nodes" are N probes (the doctor's per-node actor)
   on the one real remote node: the same creation, scheduling, transfer and gather path a cluster
   of N nodes takes. Per round, as `attach` does: connect, create the N probes and take the first
   sample (`first`), then the second sample from the same probes (`second`: what lies after the
   window). Three series:
   - `full`: each probe samples that node's slime processes in full (processes, py-spy of each,
     RAS). All N share two cores here (on a cluster each node has its own): an upper bound;
   - `waiting`: each probe's node-local work is latency-bound (its RAS probe meets a port that
     accepts and never answers, 1 s timeout; no CPU work): flat if and only if the fan-out is
     parallel;
   - `overhead`: each probe only scans processes: the cost of fanning out and gathering itself.

    python -m benchmarks.bench_nodes [two_nodes] [fanout] [rounds=5] [fan_rounds=3]
        [layouts=one_node,engines_on_node2,ranks_on_node2] [series=full,waiting,overhead]
        [trees=new=.,base=/tmp/base] [save=NAME]
    # JSON; benchmarks/results/nodes.json (written after each part), or results/NAME.json

3. **A watch's memory on two nodes** (`watch_rss`, issue 43): `watch --interval 1` of each tree
   in turn against the same job (engines on the second node: every run reaches it through the
   doctor's Ray driver) for WATCH_S seconds; psutil reads the watch process every RSS_EVERY_S
   seconds: its own RSS (not its children's), threads and live children; the RSS slope over the
   samples after RSS_WARMUP_S (least squares, MiB per hour) and its range.

With `trees`, part 1 runs the CLI of each tree (a checkout or `git archive` of another commit,
imported through PYTHONPATH) in turn, the trees alternately within each round (an A/B on one
live job): wall time minus the window and the CPU of the CLI and its children, per tree.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.machine import cli_env, load_snapshot
from benchmarks.measure import run_measured
from slime_hangdoctor.collect.node import NodeSpec, node_probes, partial_snapshot, pids_by_node
from slime_hangdoctor.collect.options import CollectOptions, Deadline
from slime_hangdoctor.collect.remote import RayTasks, RemoteNode, collect_remote, gather_remote
from slime_hangdoctor.parsers.ray_state import RAY_STATE
from slime_hangdoctor_demo import cluster
from slime_hangdoctor_demo.launch import start_demo

ROUNDS = 5
FAN_ROUNDS = 3
FANOUT = (1, 2, 4, 8, 16)
WINDOW_S = 3.0
NODE2_IP = "127.0.0.2"
LAYOUTS: dict[str, list[str]] = {
    "one_node": [],
    "engines_on_node2": [
        "--actor-node-resource",
        "node:__internal_head__",
        "--rollout-node-resource",
        "rollout_node",
    ],
    "ranks_on_node2": [
        "--actor-node-resource",
        "rollout_node",
        "--rollout-node-resource",
        "node:__internal_head__",
    ],
}
RESULTS = Path(__file__).parent / "results" / "nodes.json"


TREES: dict[str, Path] = {"this": Path(__file__).resolve().parents[1]}
CPU: dict[str, list[float]] = {}  # "tree/layout/form" -> CPU of each measured run


def _attach(address: str, out: Path, tree: Path) -> tuple[float, dict[str, Any], int, float]:
    """(wall minus the window, the verdict, the second node's records, CPU) of one `attach`."""
    run = run_measured(
        [sys.executable, "-m", "slime_hangdoctor", "attach", address, "--json", "--out", str(out)],
        timeout=120,
        env={
            **cli_env(),
            "RAY_ADDRESS": None,
            "RAY_API_SERVER_ADDRESS": None,
            "PYTHONPATH": f"{tree}{os.pathsep}{tree / 'demo'}",
        },
        cwd=str(tree),
    )
    verdict = json.loads(run.stdout)
    assert verdict["status"] == "hung", verdict["summary"]
    manifest = json.loads((out / "manifest.json").read_text())
    remote = sum(1 for p in manifest["probes"] if p.get("node_ip") == NODE2_IP)
    blind = [b for b in verdict.get("blind_spots", []) if NODE2_IP in b and "not inspected" in b]
    if blind:  # (an A/B counts them: a run that missed the node is no figure of reaching it)
        print("blind", out.name, blind, file=sys.stderr, flush=True)
        remote = -1
    WINDOWS.append(_node_window(manifest["probes"]))
    return run.wall_s - WINDOW_S, verdict, remote, run.cpu_user_s + run.cpu_sys_s


WINDOWS: list[float | None] = []  # each attach's second-node window (_node_window), in order


def _node_window(probes: list[dict[str, Any]]) -> float | None:
    """Seconds between the starts of the second node's two process scans (its clock): the
    window over which slow and hung are told apart there (issue 46)."""
    starts: dict[int, float] = {}
    for p in probes:
        scan = p.get("source") == "processes" and p.get("outcome") == "ok"
        sample = p.get("sample")
        if scan and p.get("node_ip") == NODE2_IP and sample in (0, 1):
            starts[sample] = min(starts.get(sample, float(p["started_at"])), float(p["started_at"]))
    return round(starts[1] - starts[0], 3) if len(starts) == 2 else None


def _two_nodes(head: cluster.RayHead, work: Path, layouts: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for layout in layouts:
        extra = LAYOUTS[layout]
        run = start_demo("rollout_engine_stuck", workdir=work / layout, head=head, extra_args=extra)
        try:
            run.wait_until_ready(timeout=180)
            addresses = {"gcs": head.gcs_address, "url": head.dashboard_url}
            forms = {
                f"{t}/{f}" if len(TREES) > 1 else f: (a, t)
                for f, a in addresses.items()
                for t in TREES
            }
            over: dict[str, list[float]] = {f: [] for f in forms}
            remote: dict[str, list[int]] = {f: [] for f in forms}
            windows: dict[str, list[float | None]] = {f: [] for f in forms}
            with tempfile.TemporaryDirectory() as tmp:
                for i in range(ROUNDS + 1):  # the first round warms the caches (and the nodes)
                    for form, (address, tree) in forms.items():
                        out_dir = Path(tmp) / f"{form.replace('/', '-')}-{i}"
                        o, _, n, cpu = _attach(address, out_dir, TREES[tree])
                        print(form, i, round(o, 3), n, round(cpu, 3), file=sys.stderr, flush=True)
                        if i:
                            over[form].append(o)
                            remote[form].append(n)
                            windows[form].append(WINDOWS[-1])
                            CPU.setdefault(f"{layout}/{form}", []).append(cpu)
        finally:
            run.stop()
        out[layout] = {
            form: {
                "over_window_median_s": round(statistics.median(v), 3),
                "over_window_worst_s": round(max(v), 3),
                "runs_s": [round(x, 3) for x in v],
                "second_node_records": remote[form],
                "second_node_window_s": windows[form],
                "cpu_median_s": round(statistics.median(CPU[f"{layout}/{form}"]), 3),
            }
            for form, v in over.items()
        }
        out[layout]["load"] = load_snapshot()
        print(layout, json.dumps(out[layout]), file=sys.stderr, flush=True)
    return out


WATCH_S = 300.0
RSS_EVERY_S = 5.0
RSS_WARMUP_S = 60.0


def _watch_rss(head: cluster.RayHead, work: Path) -> dict[str, Any]:
    import psutil

    extra = LAYOUTS["engines_on_node2"]
    run = start_demo("rollout_engine_stuck", workdir=work / "watch", head=head, extra_args=extra)
    out: dict[str, Any] = {}
    try:
        run.wait_until_ready(timeout=180)
        for name, tree in TREES.items():
            state = work / f"watch-{name}"
            argv = [sys.executable, "-m", "slime_hangdoctor", "watch", head.dashboard_url]
            argv += ["--interval", "1", "--state-file", str(state / "state.json")]
            argv += ["--log-file", str(state / "runs.jsonl")]
            env = {
                **cli_env(),
                "RAY_ADDRESS": None,
                "PYTHONPATH": f"{tree}{os.pathsep}{tree / 'demo'}",
            }
            proc = subprocess.Popen(
                argv,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env={k: v for k, v in {**os.environ, **env}.items() if v is not None},
                cwd=str(tree),
                start_new_session=True,
            )
            rows: list[tuple[float, float, int, int]] = []
            t0 = time.monotonic()
            try:
                watch = psutil.Process(proc.pid)
                while time.monotonic() - t0 < WATCH_S and proc.poll() is None:
                    with watch.oneshot():
                        rss = watch.memory_info().rss / 2**20
                        threads = watch.num_threads()
                    rows.append((time.monotonic() - t0, rss, threads, len(watch.children())))
                    time.sleep(RSS_EVERY_S)
            finally:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=30)
            runs = (
                (state / "runs.jsonl").read_text().splitlines()
                if (state / "runs.jsonl").exists()
                else []
            )
            after = [r for r in rows if r[0] >= RSS_WARMUP_S]
            out[name] = {
                "runs": len(runs),
                "rss_mib_first": round(rows[0][1], 1) if rows else None,
                "rss_mib_range_after_warmup": [
                    round(min(r[1] for r in after), 1),
                    round(max(r[1] for r in after), 1),
                ]
                if after
                else [],
                "rss_slope_mib_per_h": _slope([(r[0], r[1]) for r in after]),
                "threads_range": [min(r[2] for r in rows), max(r[2] for r in rows)] if rows else [],
                "children_max": max((r[3] for r in rows), default=0),
                "series": [[round(t, 1), round(v, 1), n, c] for t, v, n, c in rows],
                "load": load_snapshot(),
            }
            print(
                "watch_rss",
                name,
                {k: v for k, v in out[name].items() if k != "series"},
                file=sys.stderr,
                flush=True,
            )
    finally:
        run.stop()
    return out


def _slope(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, MiB) points, in MiB per hour."""
    if len(points) < 3:
        return None
    n = len(points)
    mx = sum(t for t, _ in points) / n
    my = sum(v for _, v in points) / n
    var = sum((t - mx) ** 2 for t, _ in points)
    return round(sum((t - mx) * (v - my) for t, v in points) / var * 3600.0, 2) if var else None


def _fanout(head: cluster.RayHead, work: Path, only: list[str]) -> dict[str, Any]:
    from slime_hangdoctor.bundle import BundleWriter
    from slime_hangdoctor.collect.dashboard import DashboardClient, capture_state

    extra = LAYOUTS["engines_on_node2"]
    run = start_demo("rollout_engine_stuck", workdir=work / "fanout", head=head, extra_args=extra)
    curve: dict[str, Any] = {}
    try:
        run.wait_until_ready(timeout=180)
        with tempfile.TemporaryDirectory() as tmp:
            probe = BundleWriter(Path(tmp) / "state", command="bench")
            capture_state(probe, DashboardClient(head.dashboard_url, timeout=5.0), sample=0)
            state = partial_snapshot(probe)
        node = next(n for n in state.joined(RAY_STATE).nodes if n.node_ip == NODE2_IP)
        pids = frozenset(pids_by_node(state)[node.node_id])
        silent = socket.socket()
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)  # accepts (kernel backlog) and never answers
        probes = frozenset(name for name, _ in node_probes())  # every node-local source
        series: dict[str, tuple[CollectOptions, frozenset[str]]] = {
            "full": (CollectOptions(), frozenset()),
            "waiting": (
                CollectOptions(ras_port=silent.getsockname()[1], probe_timeout_s=1.0),
                probes - {"nccl_ras"},
            ),
            "overhead": (CollectOptions(), probes),
        }
        try:
            for name, (opts, off) in series.items():
                if name not in only:
                    continue
                curve[name] = {}
                for n in FANOUT:
                    curve[name][str(n)] = _fan(head, node.node_id, pids, opts, off, n)
                    print("fanout", name, n, curve[name][str(n)], file=sys.stderr, flush=True)
        finally:
            silent.close()
    finally:
        run.stop()
    curve["load"] = load_snapshot()
    return curve


def _fan(
    head: cluster.RayHead,
    node_id: str,
    pids: frozenset[int],
    opts: CollectOptions,
    off: frozenset[str],
    n: int,
) -> dict[str, Any]:
    """FAN_ROUNDS rounds of: connect, N probes' first sample, their second sample (`off`: the
    node-local sources not taken)."""
    from slime_hangdoctor.bundle import BundleWriter

    connect: list[float] = []
    first: list[float] = []
    second: list[float] = []
    stacks = 0
    for _ in range(FAN_ROUNDS):
        t0 = time.monotonic()
        tasks = RayTasks(head.gcs_address, timeout_s=60.0)
        try:
            assert tasks.ready(60.0) is None, tasks.ready(0.1)
            connect.append(time.monotonic() - t0)
            # N simulated nodes: N probes on the one remote node, each its own actor
            nodes = [RemoteNode(node_id, f"{NODE2_IP}#{i}") for i in range(n)]
            with tempfile.TemporaryDirectory() as tmp:
                writer = BundleWriter(Path(tmp) / "b", command="bench")
                for sample, into in ((0, first), (1, second)):
                    if sample:  # (as `attach`: each probe's window passes before the second)
                        time.sleep(opts.window_s)
                    deadline = Deadline(90.0)
                    t1 = time.monotonic()
                    specs = [(nd, NodeSpec(NODE2_IP, sample, pids, off=off)) for nd in nodes]
                    started = collect_remote(tasks, specs, opts, deadline)
                    failed = gather_remote(tasks, writer, started, sample, deadline, 60.0)
                    into.append(time.monotonic() - t1)
                    assert not failed, [r.reason for r in writer.records if r.reason][:3]
                stacks = sum(1 for r in writer.records if r.source == "pyspy" and r.sample == 1)
        finally:
            tasks.close()
    return {
        "connect_s": round(statistics.median(connect), 3),
        "first_median_s": round(statistics.median(first), 3),
        "second_median_s": round(statistics.median(second), 3),
        "first_runs_s": [round(w, 3) for w in first],
        "second_runs_s": [round(w, 3) for w in second],
        "stacks_per_sample": stacks,
    }


def main() -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="bench-nodes-"))
    head = cluster.start_head(work, num_cpus=2)
    node: cluster.RayNodeProc | None = None
    try:
        # 16 logical CPUs: the raylet starts as many workers at once as it has CPUs, and N real nodes
        # would each start their one probe in parallel (the physical machine still has 2 cores).
        node = cluster.start_worker_node(
            head, work, resources={"rollout_node": 4}, num_cpus=16, node_ip_address=NODE2_IP
        )
        global ROUNDS, FAN_ROUNDS, WATCH_S
        only = [a for a in sys.argv[1:] if "=" not in a]
        layouts, series = list(LAYOUTS), ["full", "waiting", "overhead"]
        results = RESULTS
        for arg in sys.argv[1:]:  # rounds=N, fan_rounds=N, layouts=a,b, series=a,b
            key, _, value = arg.partition("=")
            if key == "rounds":
                ROUNDS = int(value)
            elif key == "fan_rounds":
                FAN_ROUNDS = int(value)
            elif key == "layouts":
                layouts = value.split(",")
            elif key == "series":
                series = value.split(",")
            elif key == "trees":
                TREES.clear()
                TREES.update(
                    {
                        n: Path(p).resolve()
                        for n, _, p in (t.partition("=") for t in value.split(","))
                    }
                )
            elif key == "watch_s":
                WATCH_S = float(value)
            elif key == "save":
                results = RESULTS.with_name(f"{value}.json")
        result: dict[str, Any] = {"load_at_start": load_snapshot(), "rounds": ROUNDS}
        result["trees"] = {n: str(p) for n, p in TREES.items()}
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        if not only or "two_nodes" in only:
            result["two_nodes"] = _two_nodes(head, work, layouts)
            results.write_text(json.dumps(result, indent=1))  # a part's figures survive a kill
        if not only or "fanout" in only:
            result["fanout"] = _fanout(head, work, series)
            results.write_text(json.dumps(result, indent=1))
        if "watch_rss" in only:  # (not by default: WATCH_S per tree)
            result["watch_rss"] = _watch_rss(head, work)
    finally:
        if node is not None:
            node.stop()
        head.stop()
    results.write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    print(json.dumps(main(), indent=1))
