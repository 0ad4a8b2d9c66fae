"""GPU-machine measurements for docs/gpu.md (a benchmark, not a test: it asserts nothing).

`python3 tests/gpu/bench_gpu.py --out FILE.json [--work DIR]` starts a private Ray head, runs the
`allreduce-busy` program (two ranks in a loop of 64 MiB all_reduce + synchronize, each iteration's
`time.monotonic()` written to a ring in /dev/shm by the rank itself) and measures:

1. the rank's own iteration rate undisturbed;
2. the pause one py-spy dump imposes on the rank, as the rank saw it: the excess time = the span of
   the iterations around the dump minus what they take at the undisturbed rate, and the longest gap
   between two iterations; for no dump (the noise floor), `py-spy dump --json` (what the doctor
   runs), `--json --nonblocking` and `--native`;
3. the rank's iteration rate while a whole `slime-hangdoctor attach` runs against the job;
4. NVML/GPM sampling cost: wall time per call of each NVML query the collector makes, per GPU read
   (`collect.nvml.read_gpu`, all fields), and per GPM sample;
5. how long each rank of `train-stuck` takes to write its flight-recorder dump when poked
   (`--fr-wait` seconds at most).
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.gpu import harness  # noqa: E402

RING = 8192


class Ring:
    """The rank's progress file: [count, t(ring slot 0), ..., t(ring slot RING-1)]."""

    def __init__(self, path: str) -> None:
        import numpy as np

        self.np = np
        self.mem = np.memmap(path, dtype=np.float64, mode="r", shape=(RING + 1,))

    def count(self) -> int:
        return int(self.mem[0])

    def times_since(self, t_from: float) -> list[float]:
        """Iteration times >= t_from still in the ring, ascending."""
        n = self.count()
        idx = [(1 + i % RING) for i in range(max(1, n - RING + 1), n + 1)]
        ts = sorted(float(self.mem[i]) for i in idx)
        return [t for t in ts if t >= t_from]


def rate(ring: Ring, seconds: float) -> float:
    c0, t0 = ring.count(), time.monotonic()
    time.sleep(seconds)
    return (ring.count() - c0) / (time.monotonic() - t0)


def _stats(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    return {
        "n": len(values),
        "median": round(statistics.median(values), 6),
        "min": round(min(values), 6),
        "max": round(max(values), 6),
        "mean": round(statistics.fmean(values), 6),
    }


def pyspy_pause(
    ring: Ring, pid: int, flags: list[str] | None, reps: int, base_rate: float
) -> dict[str, Any]:
    """Dump `pid` `reps` times (`flags` None: no dump, the noise floor). Per dump, from the rank's
    own iteration times in [start - 50 ms, end + 50 ms]: the longest gap between two iterations,
    and the excess time = that span minus what its iterations take at the undisturbed rate."""
    walls, gaps, excess, rcs = [], [], [], []
    for _ in range(reps):
        time.sleep(0.3)
        t0 = time.monotonic()
        if flags is None:
            time.sleep(0.011)  # as long as a plain dump takes
            rc = 0
        else:
            rc = subprocess.run(
                ["py-spy", "dump", *flags, "--pid", str(pid)],
                capture_output=True,
                timeout=60,
                check=False,
            ).returncode
        t1 = time.monotonic()
        rcs.append(rc)
        time.sleep(0.3)
        walls.append(t1 - t0)
        ts = [t for t in ring.times_since(t0 - 0.05) if t <= t1 + 0.05]
        if len(ts) < 2:
            gaps.append(t1 - t0)
            excess.append(t1 - t0)
            continue
        gaps.append(max(b - a for a, b in zip(ts, ts[1:], strict=False)))
        excess.append(max(0.0, (ts[-1] - ts[0]) - (len(ts) - 1) / base_rate))
    return {
        "flags": flags,
        "rc": rcs,
        "dump_wall_s": _stats(walls),
        "longest_iteration_gap_s": _stats(gaps),
        "excess_time_s": _stats(excess),
    }


def fr_dump_times(head: Any, work: Path, wait_s: float) -> dict[str, Any]:
    """How long each rank of train-stuck takes to write its flight-recorder dump when poked
    (rank 0 waits in NCCL; rank 1 spins in Python, holding the GIL most of the time)."""
    from slime_hangdoctor.bundle import BundleWriter
    from slime_hangdoctor.collect.flight_recorder import dump_flight_recorder, find_fr_targets

    out: dict[str, Any] = {"wait_s": wait_s}
    with harness.launch(head, "train-stuck", work) as job:
        time.sleep(harness.SETTLE_S)
        writer = BundleWriter(work / "fr-timing", command="bench")
        for r in job.ranks:
            env = {
                "RANK": str(r["rank"]),
                "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": f"/tmp/hd-frpipe-{job.tag}-",
                "TORCH_FR_DUMP_TEMP_FILE": f"/tmp/hd-fr-{job.tag}-rank_",
            }
            target = find_fr_targets(env, int(r["pid"]))
            if target is None:
                continue
            rec = dump_flight_recorder(writer, target, node_ip=None, timeout=wait_s)
            out[f"rank{r['rank']}"] = {
                "outcome": rec.outcome.value,
                "elapsed_s": round(rec.elapsed_s or 0.0, 3),
                "reason": rec.reason,
            }
    return out


def time_calls(fn: Callable[[], Any], n: int) -> dict[str, float]:
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        try:
            fn()
        except Exception:  # a refused field costs its time too
            pass
        samples.append(time.perf_counter() - t0)
    return {k: v * 1e3 for k, v in _stats(samples).items() if k != "n"} | {"n": n}


def nvml_costs() -> dict[str, Any]:
    import pynvml as N

    from slime_hangdoctor.collect.nvml import read_gpu

    t0 = time.perf_counter()
    N.nvmlInit()
    init_ms = (time.perf_counter() - t0) * 1e3
    out: dict[str, Any] = {"nvmlInit_ms": round(init_ms, 3), "unit": "ms per call", "gpus": []}
    fields = [
        N.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
        N.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
    ]
    try:
        for i in range(N.nvmlDeviceGetCount()):
            h = N.nvmlDeviceGetHandleByIndex(i)
            last: dict[int, int] = {}
            g: dict[str, Any] = {"i": i}
            g["read_gpu_all_fields"] = time_calls(
                lambda h=h, i=i, last=last: read_gpu(N, i, h, last), 200
            )
            g["utilization"] = time_calls(lambda h=h: N.nvmlDeviceGetUtilizationRates(h), 500)
            g["power"] = time_calls(lambda h=h: N.nvmlDeviceGetPowerUsage(h), 500)
            g["sm_clock"] = time_calls(
                lambda h=h: N.nvmlDeviceGetClockInfo(h, N.NVML_CLOCK_SM), 500
            )
            g["pcie_tx"] = time_calls(
                lambda h=h: N.nvmlDeviceGetPcieThroughput(h, N.NVML_PCIE_UTIL_TX_BYTES), 50
            )
            g["nvlink_fields"] = time_calls(lambda h=h: N.nvmlDeviceGetFieldValues(h, fields), 200)
            g["compute_procs"] = time_calls(
                lambda h=h: N.nvmlDeviceGetComputeRunningProcesses(h), 200
            )
            g["process_util"] = time_calls(lambda h=h: N.nvmlDeviceGetProcessUtilization(h, 0), 100)
            a, b = N.nvmlGpmSampleAlloc(), N.nvmlGpmSampleAlloc()
            try:
                g["gpm_sample_get"] = time_calls(lambda h=h, a=a: N.nvmlGpmSampleGet(h, a), 200)
            finally:
                N.nvmlGpmSampleFree(a)
                N.nvmlGpmSampleFree(b)
            out["gpus"].append(g)
    finally:
        N.nvmlShutdown()
    return out


def attach_cost(head: Any, rings: list[Ring], base: list[float]) -> dict[str, Any]:
    """Iteration rate of each rank over a whole `attach` (default options) vs undisturbed."""
    c0 = [r.count() for r in rings]
    t0 = time.monotonic()
    cli = harness.doctor(["attach", head.dashboard_url, "--json"])
    dt = time.monotonic() - t0
    rates = [(r.count() - c) / dt for r, c in zip(rings, c0, strict=True)]
    v = cli.verdict or {}
    return {
        "attach_wall_s": round(dt, 3),
        "verdict": f"{v.get('status')}/{v.get('stage')}",
        "rank_rate_during_attach_it_s": [round(x, 1) for x in rates],
        "rank_rate_undisturbed_it_s": [round(x, 1) for x in base],
        "lost_time_s": [
            round(max(0.0, (b * dt - r * dt) / b), 4) if b else None
            for b, r in zip(base, rates, strict=True)
        ],
    }


def _exit_on_term(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--work", type=Path, default=Path("/tmp/hd-bench"))
    ap.add_argument("--reps", type=int, default=8)
    ap.add_argument("--backend", default="nccl", choices=("nccl", "gloo"))
    ap.add_argument("--skip-nvml", action="store_true")
    ap.add_argument("--fr-wait", type=float, default=40.0, help="0: skip the FR dump timing")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, _exit_on_term)  # `timeout` still leaves the results and no head
    result: dict[str, Any] = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    gpu = args.backend == "nccl"
    if gpu and not args.skip_nvml:
        result["nvml"] = nvml_costs()
    args.out.write_text(json.dumps(result, indent=1))
    head = harness.start_head(args.work, num_gpus=2 if gpu else 0)
    try:
        with harness.launch(head, "allreduce-busy", args.work, backend=args.backend) as job:
            time.sleep(3.0)
            rings = [Ring(f"/dev/shm/hd-progress-{job.tag}-rank{r['rank']}") for r in job.ranks]
            base = [rate(rings[0], 2.0) for _ in range(3)]
            result["undisturbed_it_s"] = [round(x, 1) for x in base]
            b = statistics.median(base)
            pid = job.pids[0]
            result["pyspy"] = {}
            for name, flags, reps in (
                ("no_dump", None, args.reps),
                ("json", ["--json"], args.reps),
                ("nonblocking", ["--json", "--nonblocking"], args.reps),
                ("native", ["--native"], 3),
            ):
                result["pyspy"][name] = pyspy_pause(rings[0], pid, flags, reps, b)
                args.out.write_text(json.dumps(result, indent=1))
            result["undisturbed_after_it_s"] = round(rate(rings[0], 2.0), 1)
            both = [rate(r, 2.0) for r in rings]
            result["attach"] = attach_cost(head, rings, both)
        args.out.write_text(json.dumps(result, indent=1))
        if args.fr_wait > 0 and gpu:  # the flight recorder is ProcessGroupNCCL's
            result["flight_recorder_dump"] = fr_dump_times(head, args.work, args.fr_wait)
    finally:
        head.stop()
        args.out.write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
