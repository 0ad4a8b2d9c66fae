"""CPU time of `BundleWriter.add` on 1 MiB artefacts: the cost of the secret redaction that every
artefact goes through (issue 22: no measurable cost on the hot path).

    python -m benchmarks.bench_redact_add

prints one JSON object: the least CPU milliseconds of 15 adds of each input, made from real
fixtures repeated to 1 MiB (the Ray log API bodies of tests/fixtures/real/local-cpu-ray-2.60-logs,
tqdm's bars, an SGLang /metrics page, and the logs with their last character cut). To compare two
trees, unpack the older one and run the file (not `-m`, which puts this tree first on the path)
against each, alternately:

    git archive REV slime_hangdoctor | tar -x -C /tmp/old
    PYTHONPATH=/tmp/old python benchmarks/bench_redact_add.py
    PYTHONPATH=$PWD python benchmarks/bench_redact_add.py
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from slime_hangdoctor.bundle import BundleWriter, ProbeRecord
from slime_hangdoctor.outcome import Outcome
from slime_hangdoctor.parsers.logs import RAY_LOGS

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures"
MIB = 2**20


def _mib(data: bytes) -> bytes:
    return (data * (MIB // len(data) + 1))[:MIB]


def inputs() -> dict[str, bytes]:
    logs = b"".join(
        p.read_bytes() for p in sorted((FIXTURES / "real/local-cpu-ray-2.60-logs").glob("*.log"))
    )
    return {
        "ray_logs": _mib(logs),
        "tqdm_bars": _mib((FIXTURES / "real/tqdm-4.70.1/rollout_generation.err").read_bytes()),
        "metrics_page": _mib((FIXTURES / "sglang/metrics_busy.txt").read_bytes()),
        "ray_logs_cut_mid_character": _mib(logs)[:-1] + b"\xe2",
    }


def main(rounds: int = 15) -> dict[str, float]:
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        writer = BundleWriter(Path(tmp) / "b", command="bench", known_secrets=("sk-bench-0123",))
        for name, data in inputs().items():
            best = float("inf")
            for i in range(rounds):
                t0 = time.process_time()
                writer.add(ProbeRecord(RAY_LOGS, f"{name}-{i}", Outcome.OK), data, suffix=".log")
                best = min(best, time.process_time() - t0)
            out[name] = round(best * 1e3, 1)
    return out


if __name__ == "__main__":
    print(json.dumps(main()))
