"""Fixtures of the integration tests that start SGLang stand-ins (a module's own `start` wins)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.integration.sglang_standin_harness import Standin, start_standin

Start = Callable[..., Standin]


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Start]:
    started: list[Standin] = []

    def _start(*args: str) -> Standin:
        s = start_standin(tmp_path, *args)
        started.append(s)
        return s

    yield _start
    for s in started:
        s.stop()
