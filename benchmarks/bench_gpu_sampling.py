"""CPU of one look's GPU sampling (NVML series, then GPM) on a GPU node, per kind of look.

Needs NVIDIA GPUs (it was run on 2x H200: docs/gpu.md, "What the watchdog's GPU readings cost"); it
is not part of `python -m benchmarks.run`, which runs on machines without GPUs. Measures
`collect.node.sample_gpus_over` in this process (time.process_time), REPS times each:

- `attach`: window 3 s, a reading every 0.5 s, PCIe, per-process utilisation and GPM;
- `watchdog full look`: window 2 s, a reading every `watchdog.look.NVML_INTERVAL_S`;
- `watchdog stackless look`: the same without the detail (`CollectOptions.gpu_detail=False`).

Run: ``python -m benchmarks.bench_gpu_sampling`` (prints JSON).
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

REPS = 6


def measure(reps: int = REPS) -> dict[str, Any]:
    import pynvml

    from slime_hangdoctor.bundle import BundleWriter
    from slime_hangdoctor.collect.node import sample_gpus_over
    from slime_hangdoctor.collect.options import CollectOptions, Deadline
    from slime_hangdoctor.watchdog.look import NVML_INTERVAL_S

    looks = {
        "attach": CollectOptions(window_s=3.0),
        "watchdog full look": CollectOptions(window_s=2.0, nvml_interval_s=NVML_INTERVAL_S),
        "watchdog stackless look": CollectOptions(
            window_s=2.0, nvml_interval_s=NVML_INTERVAL_S, gpu_detail=False
        ),
    }
    pynvml.nvmlInit()
    out: dict[str, Any] = {"gpus": pynvml.nvmlDeviceGetCount(), "reps": reps, "looks": {}}
    pynvml.nvmlShutdown()
    for name, opts in looks.items():
        cpu: list[float] = []
        readings = 0
        sources: list[str] = []
        for _ in range(reps):
            with tempfile.TemporaryDirectory(prefix="hd-bench-gpu-") as tmp:
                writer = BundleWriter(Path(tmp) / "b", command="bench")
                t0 = time.process_time()
                sample_gpus_over(writer, None, opts, Deadline(20.0))
                cpu.append(time.process_time() - t0)
                sources = [r.source for r in writer.records]
                nvml = next(r for r in writer.records if r.source == "nvml")
                if nvml.artifact:
                    doc = json.loads((writer.root / nvml.artifact).read_text())
                    readings = len(doc["samples"])
        out["looks"][name] = {
            "cpu_ms_median": round(statistics.median(cpu) * 1e3, 1),
            "cpu_ms": [round(c * 1e3, 1) for c in cpu],
            "readings": readings,
            "probes": sources,
        }
    return out


if __name__ == "__main__":
    print(json.dumps(measure(), indent=1))
