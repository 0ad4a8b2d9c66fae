"""Demo fault `reward_service_stuck`: a remote reward model outside the job (`--rm-url`).

A reward service answers slime's `remote_rm` (POST the sample as JSON, answer the reward as JSON) for
its first `--answer` requests, then wedges: it accepts and reads every later request and never
answers (a judge model stuck on its GPU, a service deadlocked behind its own queue). It runs as a
process of its own, detached from the job's process tree (as a service on another host would be):
none of the job's processes serves its port.

    python -m user_plugins.reward_service --port P --answer N
"""

from __future__ import annotations

import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_lock = threading.Lock()
_served = 0
_wedged = threading.Event()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--answer", type=int, required=True, help="requests answered before it wedges")
    args = p.parse_args()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            global _served
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            with _lock:
                _served += 1
                answer = _served <= args.answer
            if not answer:
                _wedged.wait()  # read, never answered
                return
            body = json.dumps(1.0).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
