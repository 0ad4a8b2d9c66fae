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


# What runs beside the live pool, in one process: the unit tests and the linters, which start no
# Ray head and no demo job, and keep one core busy at most, while the pool's demo jobs leave part
# of a 2-core box idle (a fault settling, a job's processes starting one after another, a watch's
# next tick). A test that changes what the whole process shares (its environment, module
# attributes, captured output or logging, warnings) runs after the pool instead: the pool's threads
# run in this process.
BESIDE_PATHS = ("tests/unit/", "tests/test_lint.py")
PROCESS_WIDE_FIXTURES = frozenset(
    {"monkeypatch", "capsys", "capsysbinary", "capfd", "capfdbinary", "caplog", "recwarn"}
)


def runs_beside_the_pool(item: pytest.Item) -> bool:
    """Whether `item` may run while the live pool's demo jobs run (see BESIDE_PATHS)."""
    where = item.nodeid.split("::", 1)[0]
    if not where.startswith(BESIDE_PATHS) or where.endswith("/conftest.py"):
        return False
    if any(item.get_closest_marker(m) is not None for m in (LIVE_MARK, "ray", "process_wide")):
        return False
    return not PROCESS_WIDE_FIXTURES.intersection(getattr(item, "fixturenames", ()))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In one process: the unit tests and linters first, while the live pool (started with the
    first test) runs the demo jobs; then the live tests, one after another, which mostly collect
    results by then; then the rest, which start processes and servers of their own, with the
    machine to themselves. On a pytest-xdist worker (tests/xdist_plan.py): the live tests first."""
    live = [item for item in items if item.get_closest_marker(LIVE_MARK) is not None]
    for item in live:
        if item.get_closest_marker("timeout") is None:
            # a live test may wait for scenarios queued before its own (the long ones first)
            item.add_marker(pytest.mark.timeout(RESULT_TIMEOUT_S + 60))
    if not live:
        return
    rest = [item for item in items if item.get_closest_marker(LIVE_MARK) is None]
    beside: list[pytest.Item] = []
    if not hasattr(config, "workerinput"):
        beside = [item for item in rest if runs_beside_the_pool(item)]
        rest = [item for item in rest if not runs_beside_the_pool(item)]
    items[:] = beside + live + rest


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


@pytest.fixture(scope="session", autouse=True)
def _live_pool_from_the_first_test(request: pytest.FixtureRequest) -> None:
    """In one process, the live pool starts with the session's first test, so that its demo jobs
    run while the tests before the live ones (runs_beside_the_pool) run."""
    if hasattr(request.config, "workerinput"):
        return
    if any(item.get_closest_marker(LIVE_MARK) is not None for item in request.session.items):
        request.getfixturevalue("live_pool")


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """After the last live test, the pool's Ray heads stop (not at the end of the session: idle
    heads would still take CPU from the tests after them)."""
    pool = item.config.stash.get(_POOL, None)
    if pool is None or item.get_closest_marker(LIVE_MARK) is None:
        return
    if nextitem is None or nextitem.get_closest_marker(LIVE_MARK) is None:
        pool.close()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The live scenarios that held a pool slot longest: a live test's own duration (pytest's
    --durations) also counts its wait for the scenarios queued before its own."""
    pool = terminalreporter.config.stash.get(_POOL, None)
    if pool is None or not pool.took:
        return
    terminalreporter.section("slowest live scenarios (seconds each held a pool slot)")
    for name, took in pool.slowest(15):
        terminalreporter.write_line(f"{took:8.2f}s {name}")
