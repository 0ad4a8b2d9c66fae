"""Issue 46 item 4: the demo with its train ranks on node 2 (and ranks on node 2, engines on node 3),
`attach` time to verdict (wall minus the 3 s window), GCS and URL forms alternating.

Run on the lent 16-core machine from the repository root (Ray, py-spy and sglang-router carried):
    FAULT=train_rank_stuck ROUNDS=3 OUTF=$OUT/ranks-remote.json python benchmarks/device_ranks_remote.py
Results: benchmarks/results/device-ranks-remote-issue46.json (docs/multi-node.md)."""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from slime_hangdoctor_demo import cluster
from slime_hangdoctor_demo.launch import start_demo

WINDOW = 3.0
FAULT = os.environ.get("FAULT", "train_rank_stuck")
ROUNDS = int(os.environ.get("ROUNDS", "3"))
SHAPES = os.environ.get("SHAPES", "ranks_remote,split").split(",")
OUT = Path(os.environ.get("OUTF", "ranks-remote.json"))


def attach(address: str, out: Path) -> dict:
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "slime_hangdoctor", "attach", address, "--json",
                        "--window", "3", "--timeout", "30", "--bundle", str(out)],
                       check=False, capture_output=True, text=True, timeout=90)
    wall = time.monotonic() - t0
    v = json.loads(p.stdout) if p.stdout.strip().startswith("{") else {}
    c = (v.get("culprits") or [{}])[0]
    return {"over_s": round(wall - WINDOW, 3), "rc": p.returncode, "status": v.get("status"),
            "stage": v.get("stage"), "culprit": {k: c.get(k) for k in ("role", "rank", "node_ip", "pid")},
            "blind": [b for b in v.get("blind_spots", []) if "not inspected" in str(b)][:2],
            "err": p.stderr[-400:] if p.returncode not in (0, 1, 2) else ""}


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="hd-rr-"))
    res = {"fault": FAULT, "cpus": os.cpu_count(), "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    head = cluster.start_head(work, num_cpus=2)
    nodes = []
    try:
        nodes.append(cluster.start_worker_node(head, work / "n2", resources={"train_node": 8}, num_cpus=1,
                                               node_ip_address="127.0.0.2"))
        if "split" in SHAPES:
            nodes.append(cluster.start_worker_node(head, work / "n3", resources={"rollout_node": 8},
                                                   num_cpus=1, node_ip_address="127.0.0.3"))
        for shape in SHAPES:
            rollout = "node:__internal_head__" if shape == "ranks_remote" else "rollout_node"
            args = ["--actor-node-resource", "train_node", "--rollout-node-resource", rollout]
            run = start_demo(FAULT, workdir=work / shape, head=head, extra_args=args)
            try:
                run.wait_until_ready(timeout=150)
                runs = {"gcs": [], "url": []}
                for i in range(ROUNDS + 1):
                    for form, addr in (("gcs", head.gcs_address), ("url", head.dashboard_url)):
                        got = attach(addr, work / f"{shape}-{form}-{i}")
                        print(shape, form, i, got, flush=True)
                        if i:
                            runs[form].append(got)
                res[shape] = {f: {"over_window_median_s": round(statistics.median(r["over_s"] for r in rs), 3),
                                  "over_window_worst_s": round(max(r["over_s"] for r in rs), 3), "runs": rs}
                              for f, rs in runs.items()}
                res["load"] = os.getloadavg()
                OUT.write_text(json.dumps(res, indent=1))
            finally:
                run.stop()
    finally:
        for n in nodes:
            n.stop()
        head.stop()
    OUT.write_text(json.dumps(res, indent=1))
    print(json.dumps(res, indent=1)[:3000])


if __name__ == "__main__":
    main()
