"""The standalone session-server process (as miles/rollout/session/server.py and sessions.py,
31f1ca961): one event loop serves the routes and proxies each session's requests to the router
with one shared HTTP client. miles serves it with FastAPI on uvicorn; the demo job has neither, so
a small asyncio HTTP/1.1 server (keep-alive, Content-Length bodies) stands in for them: one loop,
whose handlers run to their first await as uvicorn's do, so a synchronous `_render_json` of a big
session holds every other request of the process (unaccepted connections wait in the listen
queue, accepted ones keep their request bytes unread).

Routes (sessions.py): `GET /health`, `POST /sessions`, `GET|DELETE /sessions/{id}`, and
`/sessions/{id}/{path}` proxied to the router's `/{path}` (`SessionServer.do_proxy`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
from typing import Any

from slime.rollout.session.core import SessionCore, SessionRegistry

logger = logging.getLogger(__name__)

JSON = "application/json"
# request headers not forwarded verbatim to the backend (server.py:24)
_DROP_REQUEST_HEADERS = ("content-length", "transfer-encoding", "host")


class SessionServer:
    def __init__(self, args: argparse.Namespace, backend_url: str) -> None:
        self.backend_url = backend_url
        armed = args.fault == "rollout_session_server_blocked"
        self.core = SessionCore(SessionRegistry(), args.fault_after_steps if armed else None)
        self.client: Any = None  # aiohttp.ClientSession, made on the loop

    async def do_proxy(
        self, session_id: str, path: str, body: bytes, headers: dict[str, str]
    ) -> tuple[int, bytes]:
        import aiohttp

        if self.client is None:
            self.client = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=600.0),
                connector=aiohttp.TCPConnector(limit=1024),
            )
        forward = {k: v for k, v in headers.items() if k not in _DROP_REQUEST_HEADERS}
        url = f"{self.backend_url}/{path}"
        async with self.client.post(url, data=body, headers=forward) as response:
            content = await response.read()
            status = response.status
        try:
            self.core.record(session_id, json.loads(body or b"{}"), json.loads(content or b"{}"))
        except (KeyError, ValueError):
            pass
        return status, content

    async def route(
        self, method: str, path: str, body: bytes, headers: dict[str, str]
    ) -> tuple[int, bytes]:
        parts = [p for p in path.split("?", 1)[0].split("/") if p]
        if parts == ["health"]:
            return 200, self.core.health()
        if parts == ["sessions"] and method == "POST":
            rollout_id = int((json.loads(body or b"{}") or {}).get("rollout_id", -1))
            return 200, self.core.create_session(rollout_id)
        if len(parts) == 2 and parts[0] == "sessions":
            if parts[1] not in self.core.registry.sessions:
                return 404, json.dumps({"error": "session not found"}).encode()
            if method == "GET":
                return 200, self.core.get_session(parts[1])
            if method == "DELETE":
                return 200, self.core.delete_session(parts[1])
        if len(parts) >= 3 and parts[0] == "sessions":
            return await self.do_proxy(parts[1], "/".join(parts[2:]), body, headers)
        return 404, json.dumps({"error": f"no route {method} {path}"}).encode()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                line = await reader.readline()
                if not line:
                    return
                method, path, _version = line.decode("latin-1").split(" ", 2)
                headers: dict[str, str] = {}
                while (header := await reader.readline()) not in (b"\r\n", b"\n", b""):
                    name, _, value = header.decode("latin-1").partition(":")
                    headers[name.strip().lower()] = value.strip()
                length = int(headers.get("content-length") or 0)
                body = await reader.readexactly(length) if length else b""
                status, content = await self.route(method, path, body, headers)
                head = (
                    f"HTTP/1.1 {status} {'OK' if status == 200 else 'Error'}\r\n"
                    f"Content-Type: {JSON}\r\nContent-Length: {len(content)}\r\n\r\n"
                )
                writer.write(head.encode("latin-1") + content)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            return
        finally:
            writer.close()

    async def serve(self, host: str, port: int) -> None:
        server = await asyncio.start_server(self.handle, host, port, backlog=1024)
        async with server:
            await server.serve_forever()


def run_session_server(args: argparse.Namespace, backend_url: str) -> None:
    """Entry point of the session-server subprocess (spawned: a fresh interpreter, which sets its
    own process title, as miles's does)."""
    import setproctitle

    from slime.utils.misc import set_parent_death_signal

    set_parent_death_signal()  # demo hygiene: dies with the RolloutManager that spawned it
    setproctitle.setproctitle("miles-session-server")
    logging.basicConfig(level=logging.INFO)
    server = SessionServer(args, backend_url)
    logger.info(
        "[session-server] Starting on %s:%s, proxying to %s",
        args.session_server_ip,
        args.session_server_port,
        backend_url,
    )
    asyncio.run(server.serve(args.session_server_ip, args.session_server_port))
