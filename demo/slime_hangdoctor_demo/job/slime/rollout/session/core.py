"""The session registry and its renderings (as miles/rollout/session/core.py, 31f1ca961).

A session keeps a record of every request proxied for it (the request, the answer and, with
rollout routing replay (R3), the routed experts of every token). `get_session` renders the whole
record list as one JSON body with `_render_json` (core.py:55-57: a synchronous `json.dumps` on the
server's one event loop, then `.encode("utf-8")`), as miles PR#1602 found: at GiB-scale records
(accumulated R3 replay payloads, 30k-120k-token trajectories) one render holds the loop for 5-23 s.

Demo scale (fault `rollout_session_server_blocked`): from the armed rollout on, each record's
replay payload is `REPLAY_ROWS` rows of one shared row of expert ids (memory: a list of
references; the rendering walks every row, ~128 MB of JSON per session); before it, records carry
no replay.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

# one token's routed experts over the layers (top-k ids per layer), and the rows of a session
REPLAY_ROW = [(7 * i) % 128 for i in range(4096)]
REPLAY_ROWS = 12_000


def _render_json(payload: Any) -> bytes:
    """Encode like Starlette's JSONResponse (compact, non-ASCII preserved)."""
    return json.dumps(payload, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode(
        "utf-8"
    )


@dataclass
class Session:
    records: list[dict[str, Any]] = field(default_factory=list)
    rollout_id: int = -1


class SessionRegistry:
    def __init__(self) -> None:
        self.sessions: dict[str, Session] = {}

    def create_session(self, rollout_id: int) -> str:
        session_id = uuid.uuid4().hex
        self.sessions[session_id] = Session(rollout_id=rollout_id)
        return session_id

    def get_session(self, session_id: str) -> Session:
        return self.sessions[session_id]


class SessionCore:
    """The routes' logic; `replay_from` is the first rollout whose records carry R3 replay (the
    demo fault's armed rollout; None: never)."""

    def __init__(self, registry: SessionRegistry, replay_from: int | None) -> None:
        self.registry = registry
        self.replay_from = replay_from

    def health(self) -> bytes:
        return _render_json({"status": "ok"})

    def create_session(self, rollout_id: int) -> bytes:
        return _render_json({"session_id": self.registry.create_session(rollout_id)})

    def record(self, session_id: str, request: Any, response: Any) -> None:
        session = self.registry.get_session(session_id)
        entry: dict[str, Any] = {"request": request, "response": response}
        if self.replay_from is not None and session.rollout_id >= self.replay_from:
            entry["routed_experts"] = [REPLAY_ROW] * REPLAY_ROWS
        session.records.append(entry)

    def get_session(self, session_id: str) -> bytes:
        session = self.registry.get_session(session_id)
        payload = {"session_id": session_id, "records": session.records, "metadata": {}}
        return _render_json(payload)

    def delete_session(self, session_id: str) -> bytes:
        self.registry.sessions.pop(session_id, None)
        return _render_json({"deleted": session_id})
