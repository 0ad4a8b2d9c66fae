"""The live pool says how long each scenario held its slot (tests/live_pool.py `LivePool.took`,
printed at the end of the session by tests/conftest.py): a live test's own duration also counts
its wait for the scenarios queued before it, so only this says which scenario is slow. Two real
scenarios of the pool's, run on its threads; neither asks for its slot's Ray head."""

from __future__ import annotations

import time

import pytest

from tests.live_pool import LivePool, Slot, add_scenario


def _sleeps(seconds: float) -> object:
    def scenario(_slot: Slot) -> float:
        time.sleep(seconds)
        return seconds

    return scenario


def test_the_pool_keeps_how_long_each_scenario_held_its_slot(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    add_scenario("timing-test:slow", _sleeps(0.6))  # type: ignore[arg-type]
    add_scenario("timing-test:quick", _sleeps(0.0))  # type: ignore[arg-type]
    pool = LivePool(tmp_path_factory, slots=1)
    try:
        pool.submit(["timing-test:quick", "timing-test:slow"])
        assert pool.result("timing-test:slow", timeout=30) == 0.6
        assert pool.result("timing-test:quick", timeout=30) == 0.0
    finally:
        pool.close()
    (first, slow), (second, quick) = pool.slowest(2)
    assert (first, second) == ("timing-test:slow", "timing-test:quick")
    # the slow one held its slot for its own sleep, not for the quick one queued before it
    assert 0.6 <= slow < 0.6 + 5.0 and quick < slow
