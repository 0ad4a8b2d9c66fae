"""What one node's probe costs to boot, and its first sample (issue 46 item 3).

At 64 emulated raylets on 16 cores the first remote sample grew about 0.1 s per node past 16:
each node's probe worker starts, imports the doctor's package from the sources the driver sent
(`collect/probe_boot.py`) and takes its first sample, all on the same cores. This measures that
per-node work on its own, in a fresh interpreter that stands in for the node's Ray worker (it
imports `ray` first, as a worker has; the probe's modules come only from what the driver sent):

- `boot`: unpickling what the driver sent and `BootProbe(...)` (installing the sources and
  importing the probe's entry module, `collect/remote.py`), CPU and wall;
- `import_ms`: what `-X importtime` logs of that boot (the outermost imports' cumulative times:
  `importlib.import_module` of the entry module itself is not logged, what it imports is);
- `first` / `second`: the probe's first and second `sample` call (a real sample of NPROCS
  slime-titled processes of this machine with their py-spy stacks, as a node of the 64-raylet
  job has), CPU of the probe and of its py-spy children, and wall;
- `doctor_per_answer`: the doctor's side of one node's answer (the second sample's, read within
  its bounds and filed into a bundle: `read_answer`, `add_exported`), per answer over 64;
- `driver`: the driver's side, once per run: `package_sources()` in a fresh interpreter (its
  bytecode cache warm, as the driver's own imports leave it: `machine.cli_env`), CPU, and the
  pickled size of what every node is sent.

    python -m benchmarks.bench_probe_boot [--runs 5] [--base DIR] [--save NAME]
        [--worker-actors N]   # (a local Ray head: run it under `flock /work/ray.lock`)

With `--worker-actors N`, per tree: a local Ray head, and N times an actor that does nothing and
the probe (`BootProbe` with what the driver sends), each on a worker of its own: each worker's
CPU once its actor is ready. The first is what Ray's worker start costs a node, whatever the
probe; the second adds the probe's boot.

With `--base DIR` (a `git archive` of another commit) each run of this tree is followed by the
same run of that tree, under the same load. Results: benchmarks/results/NAME.json (default
`probe-boot`), medians per tree; docs/performance.md cites them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.machine import REPO_ROOT, cli_env, describe, env_with
from benchmarks.titled_procs import titled_processes

RESULTS = REPO_ROOT / "benchmarks" / "results"
NPROCS = 3  # an engine actor and its two children, as on each node of device_nodes.py
CHILD_TIMEOUT_S = 180

DRIVER = r"""
import json, pickle, resource, sys, time
t0 = time.process_time()
from slime_hangdoctor.collect.ray_driver import package_sources
sent = package_sources()
cpu = time.process_time() - t0
blob = pickle.dumps(sent)
open(sys.argv[1], "wb").write(blob)
print(json.dumps({"cpu_s": round(cpu, 4), "sent_bytes": len(blob)}))
"""

NODE = r"""
ANSWERS = 64
import importlib, json, os, pickle, resource, sys, time
try:
    import ray  # a Ray worker has it imported before the probe's class arrives
    import ray._private.worker
    had_ray = True
except ImportError:
    had_ray = False

def now():
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time(), kids.ru_utime + kids.ru_stime, time.perf_counter()

def since(t):
    c, k, w = now()
    return {"cpu_s": round(c - t[0], 4), "children_cpu_s": round(k - t[1], 4),
            "wall_s": round(w - t[2], 4)}

blob = open(sys.argv[1], "rb").read()
roots = frozenset(int(p) for p in sys.argv[2].split(","))
import slime_hangdoctor.collect.probe_boot as probe_boot
for name in [m for m in sys.modules if m.startswith("slime_hangdoctor.") and m != probe_boot.__name__]:
    del sys.modules[name]
t = now()
print("BOOT-START", file=sys.stderr, flush=True)
probe = probe_boot.BootProbe(0, pickle.loads(blob))
print("BOOT-END", file=sys.stderr, flush=True)
out = {"had_ray": had_ray, "boot": since(t)}
node_probe = importlib.import_module("slime_hangdoctor.collect.node_probe")
options = importlib.import_module("slime_hangdoctor.collect.options")
opts = options.CollectOptions(window_s=0.0)
for sample, key in ((0, "first"), (1, "second")):
    t = now()
    answer = probe.sample(node_probe.NodeSpec("127.0.0.1", sample, roots), opts, 30.0)
    out[key] = since(t)
    out[key]["answer_bytes"] = len(answer)
out["package_modules"] = sum(1 for m in sys.modules if m.startswith("slime_hangdoctor"))
# the doctor's side of one node's answer: read within bounds, filed into the run's bundle
import tempfile
from pathlib import Path
remote = importlib.import_module("slime_hangdoctor.collect.remote")
bundle = importlib.import_module("slime_hangdoctor.bundle")
with tempfile.TemporaryDirectory() as tmp:
    writer = bundle.BundleWriter(Path(tmp) / "b", command="bench")
    t = now()
    for i in range(ANSWERS):
        exported, _ = remote.read_answer(answer)
        node = remote.RemoteNode(f"node{i}", f"10.0.{i // 250}.{i % 250}")
        remote.add_exported(writer, exported, remote.Asked(node, 1, remote.SAMPLE_SOURCES))
    done = since(t)
out["doctor_per_answer"] = {k: round(v / ANSWERS, 5) for k, v in done.items()}
print(json.dumps(out))
"""

WORKER = r"""
import json, os, sys, time
import psutil, ray
import ray.cloudpickle as cloudpickle
from slime_hangdoctor.collect import probe_boot
from slime_hangdoctor.collect.ray_driver import package_sources

class Plain:  # an actor that does nothing: what Ray's worker costs before the probe's boot
    def __init__(self, first, sent):
        pass

def titled(title):
    return {p.pid: p for p in psutil.process_iter(["cmdline"])
            if (p.info["cmdline"] or [""])[0].startswith(title)}

ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
cloudpickle.register_pickle_by_value(probe_boot)  # as the doctor's driver sends it
sent = ray.put(package_sources())
kinds = {"Plain": ray.remote(num_cpus=0)(Plain),
         "BootProbe": ray.remote(num_cpus=0, max_concurrency=4)(probe_boot.BootProbe)}
out, keep = {name: [] for name in kinds}, []
for _ in range(int(sys.argv[1])):
    for name, cls in kinds.items():
        before = set(titled("ray::" + name))
        t = time.perf_counter()
        handle = cls.remote(0, sent)
        ray.get(handle.__ray_ready__.remote())
        wall = time.perf_counter() - t
        time.sleep(0.2)  # (its title is set as the constructor returns)
        new = [p for pid, p in titled("ray::" + name).items() if pid not in before]
        cpu = sum(sum(p.cpu_times()[:2]) for p in new)
        out[name].append({"worker_cpu_s": round(cpu, 3), "wall_s": round(wall, 3)})
        keep.append(handle)
print(json.dumps(out))
ray.shutdown()
"""

_IMPORT_LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \| (\s*)(\S+)")


def boot_import_ms(stderr: str) -> float | None:
    """The outermost imports `-X importtime` logged between the boot's two marks, summed (ms)."""
    lines = stderr.splitlines()
    if "BOOT-START" not in lines or "BOOT-END" not in lines:
        return None
    inside = lines[lines.index("BOOT-START") + 1 : lines.index("BOOT-END")]
    top = [int(m.group(2)) for m in map(_IMPORT_LINE.match, inside) if m and not m.group(3)]
    return round(sum(top) / 1000, 1)


def _env(tree: Path) -> dict[str, str]:
    env = env_with(cli_env())
    env["PYTHONPATH"] = f"{tree}:{tree / 'demo'}"
    return env


def _child(argv: list[str], tree: Path) -> tuple[dict[str, Any], str]:
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
        cwd=tree,
        env=_env(tree),
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{argv[:3]} in {tree}: {done.stderr[-3000:]}")
    parsed: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return parsed, done.stderr


def one_run(tree: Path, pids: list[int]) -> dict[str, Any]:
    """The driver's side, then one node's boot and two samples, each in a fresh interpreter."""
    with tempfile.TemporaryDirectory(prefix="hd-probe-boot-") as tmp:
        sent = Path(tmp) / "sent.pickle"
        driver, _ = _child([sys.executable, "-c", DRIVER, str(sent)], tree)
        node, stderr = _child(
            [sys.executable, "-X", "importtime", "-c", NODE, str(sent), ",".join(map(str, pids))],
            tree,
        )
    node["import_ms"] = boot_import_ms(stderr)
    return {"driver": driver, **node}


def worker_run(tree: Path, actors: int) -> dict[str, Any]:
    """A local Ray head; `actors` times, an actor that does nothing and the probe, each on a
    worker of its own: each worker's CPU once its actor is ready (Ray's worker start, and that
    plus the probe's boot)."""
    got, _ = _child([sys.executable, "-c", WORKER, str(actors)], tree)
    return got


def _median(runs: list[dict[str, Any]], *path: str) -> float | None:
    values = []
    for r in runs:
        v: Any = r
        for key in path:
            v = v.get(key) if isinstance(v, dict) else None
        if isinstance(v, (int, float)):
            values.append(float(v))
    return round(statistics.median(values), 4) if values else None


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"runs": len(runs)}
    for phase in ("boot", "first", "second"):
        out[phase] = {
            key: _median(runs, phase, key) for key in ("cpu_s", "children_cpu_s", "wall_s")
        }
    out["import_ms"] = _median(runs, "import_ms")
    out["doctor_per_answer"] = {
        key: _median(runs, "doctor_per_answer", key) for key in ("cpu_s", "wall_s")
    }
    out["driver_cpu_s"] = _median(runs, "driver", "cpu_s")
    out["sent_bytes"] = _median(runs, "driver", "sent_bytes")
    out["package_modules"] = _median(runs, "package_modules")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--base", type=Path, default=None, help="another tree to alternate with")
    parser.add_argument("--save", default="probe-boot")
    parser.add_argument(
        "--worker-actors",
        type=int,
        default=0,
        help="also start a local Ray head and time N workers per tree (run under flock)",
    )
    args = parser.parse_args()
    trees = {"this": REPO_ROOT}
    if args.base is not None:
        trees["base"] = args.base.resolve()
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    with titled_processes(NPROCS) as pids:
        for i in range(args.runs + 1):  # the first round warms the bytecode caches: dropped
            for name, tree in trees.items():
                got = one_run(tree, pids)
                print(f"{name} run {i}: {json.dumps(got)}", flush=True)
                if i:
                    runs[name].append(got)
    workers: dict[str, Any] = {}
    if args.worker_actors:
        for name, tree in trees.items():
            got = worker_run(tree, args.worker_actors)
            print(f"{name} workers: {json.dumps(got)}", flush=True)
            workers[name] = {
                kind: {
                    "worker_cpu_median_s": _median(rs, "worker_cpu_s"),
                    "wall_median_s": _median(rs, "wall_s"),
                    "runs": rs,
                }
                for kind, rs in got.items()
            }
    result = {
        "machine": describe(),
        "started": started,
        "load_at_end": os.getloadavg(),
        "trees": {name: str(tree) for name, tree in trees.items()},
        "summary": {name: summarise(rs) for name, rs in runs.items()},
        "runs": runs,
        "workers": workers,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.save}.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["summary"], indent=1))
    print(json.dumps({n: {k: v["worker_cpu_median_s"] for k, v in w.items()} for n, w in workers.items()}))


if __name__ == "__main__":
    main()
