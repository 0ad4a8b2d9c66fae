"""CPU and wall time of one `collect.http.get` (every probe of a dashboard, an engine or a router
goes through it) against a local server answering a recorded SGLang `/metrics` page: what the
one-deadline reader (issue 32, point 2) costs per request.

    python -m benchmarks.bench_http_get

prints one JSON object: the median and least of ROUNDS GETs, CPU and wall milliseconds. To compare
two trees, unpack the older one and run the file (not `-m`) against each, alternately:

    git archive REV slime_hangdoctor | tar -x -C /tmp/old
    PYTHONPATH=/tmp/old python benchmarks/bench_http_get.py
    PYTHONPATH=$PWD python benchmarks/bench_http_get.py
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from slime_hangdoctor.collect.http import get

PAGE = (Path(__file__).resolve().parents[1] / "tests/fixtures/sglang/metrics_busy.txt").read_bytes()
ROUNDS = 300


class _Page(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, *args: object) -> None:
        pass


def main(rounds: int = ROUNDS) -> dict[str, float]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
    cpu: list[float] = []
    wall: list[float] = []
    try:
        for _ in range(rounds):
            c0, w0 = time.thread_time(), time.perf_counter()
            got = get(url, {}, timeout=2.0, deadline=time.monotonic() + 2.0, max_body=4 << 20)
            cpu.append(time.thread_time() - c0)
            wall.append(time.perf_counter() - w0)
            assert got.body == PAGE
    finally:
        server.shutdown()
        server.server_close()
    ms = 1e3
    return {
        "cpu_ms_median": round(statistics.median(cpu) * ms, 3),
        "cpu_ms_min": round(min(cpu) * ms, 3),
        "wall_ms_median": round(statistics.median(wall) * ms, 3),
        "wall_ms_min": round(min(wall) * ms, 3),
    }


if __name__ == "__main__":
    print(json.dumps(main()))
