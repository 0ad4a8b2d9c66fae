"""Fixtures shared by the integration tests that need a live Ray head."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from slime_hangdoctor.demo import cluster


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[cluster.RayHead]:
    """A real Ray head with its dashboard (2 CPUs), one per test module, stopped after it."""
    h = cluster.start_head(tmp_path_factory.mktemp("ray-head"), num_cpus=2)
    try:
        yield h
    finally:
        h.stop()
