"""`TypeBasedDispatcher`, as in `python/sglang/utils.py`: exceptions are not caught."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Msg = dict[str, Any]


class TypeBasedDispatcher:
    """Routes a request to its handler by type (as `sglang/utils.py`); exceptions are not caught."""

    def __init__(self, mapping: list[tuple[str, Callable[[Msg], Msg | None]]]) -> None:
        self._mapping = dict(mapping)

    def __call__(self, req: Msg) -> Msg | None:
        handler = self._mapping.get(str(req.get("type")))
        if handler is None:
            raise ValueError(f"Invalid object: {req.get('type')!r}")
        return handler(req)
