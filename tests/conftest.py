"""Session-wide test set-up: the live pool (tests/live_pool.py), the order that serves it, and
how the whole suite spreads over the CPUs (tests/xdist_plan.py)."""

from __future__ import annotations

import compileall
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.live_pool import LIVE_MARK, RESULT_TIMEOUT_S, LivePool, live_names

ROOT = Path(__file__).resolve().parents[1]
# the doctor's package and the demo's (its own distribution, demo/): both are imported by the
# processes the suite starts
PACKAGES = (ROOT / "slime_hangdoctor", ROOT / "demo" / "slime_hangdoctor_demo")


def pytest_sessionstart(session: pytest.Session) -> None:
    """Byte-compile the packages once, as `pip install` does for installed ones: the suite
    starts hundreds of Python processes that import it (the CLI, the demo's engines), and on a
    machine with PYTHONDONTWRITEBYTECODE=1 each would compile it from source again (~0.3 s of CPU
    per CLI run). compileall writes the caches whatever that variable says; Python reads them."""
    for package in PACKAGES:
        compileall.compile_dir(package, quiet=1, workers=0)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """The whole suite (no paths named) on one pytest-xdist worker per CPU (tests/xdist_plan.py)."""
    if config.pluginmanager.hasplugin("xdist"):
        from tests import xdist_plan

        xdist_plan.choose(config)


def pytest_configure(config: pytest.Config) -> None:
    if config.pluginmanager.hasplugin("xdist"):
        from tests import xdist_plan

        config.pluginmanager.register(xdist_plan.Plan(), "hangdoctor-xdist-plan")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Live tests first, in their order, then the rest in theirs: the pool's scenarios then run
    while the live tests wait for them, not beside the CPU-bound tests."""
    live = [item for item in items if item.get_closest_marker(LIVE_MARK) is not None]
    for item in live:
        if item.get_closest_marker("timeout") is None:
            # a live test may wait for scenarios queued before its own (the long ones first)
            item.add_marker(pytest.mark.timeout(RESULT_TIMEOUT_S + 60))
    if live:
        rest = [item for item in items if item.get_closest_marker(LIVE_MARK) is None]
        items[:] = live + rest


_POOL = pytest.StashKey[LivePool]()


@pytest.fixture(scope="session")
def live_pool(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LivePool]:
    """The session's live pool, with every selected live test's scenario already submitted."""
    pool = LivePool(tmp_path_factory)
    request.config.stash[_POOL] = pool
    try:
        pool.submit(live_names(request.session.items))
        yield pool
    finally:
        pool.close()


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """After the last live test, the pool's Ray heads stop (not at the end of the session: idle
    heads would still take CPU from the tests after them)."""
    pool = item.config.stash.get(_POOL, None)
    if pool is not None and (nextitem is None or nextitem.get_closest_marker(LIVE_MARK) is None):
        pool.close()
