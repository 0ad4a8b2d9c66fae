"""The cron watchdog's stall clock: OK on progress, WARNING below the threshold, CRITICAL past it."""

from __future__ import annotations

import json
import multiprocessing
import time
from pathlib import Path

import pytest

from slime_hangdoctor.verdict import ExitCode, Stage, Status, Verdict
from slime_hangdoctor.watchdog.decide import decide_check, parse_duration
from slime_hangdoctor.watchdog.state import (
    LockHeld,
    StallLook,
    WatchState,
    load_state,
    run_lock,
    save_state,
)

HUNG = Verdict(Status.HUNG, Stage.TRAIN, "rank 1 stuck", window_s=2.0)
OK = Verdict(Status.PROGRESSING, Stage.NONE, "moving", window_s=2.0)


def test_first_hung_run_is_a_warning_then_critical_after_the_threshold() -> None:
    """A stall turns 1 then 2 once no progress has been seen for --stall-after."""
    d1 = decide_check(HUNG, {"m": "1"}, WatchState(), now=1000.0, stall_after_s=60)
    assert d1.exit_code is ExitCode.WARNING and d1.stalled_for_s == pytest.approx(2.0)
    d2 = decide_check(HUNG, {"m": "1"}, d1.state, now=1030.0, stall_after_s=60)
    assert d2.exit_code is ExitCode.WARNING
    d3 = decide_check(HUNG, {"m": "1"}, d2.state, now=1061.0, stall_after_s=60)
    assert d3.exit_code is ExitCode.CRITICAL and d3.new_stall
    d4 = decide_check(HUNG, {"m": "1"}, d3.state, now=1120.0, stall_after_s=60)
    assert d4.exit_code is ExitCode.CRITICAL and not d4.new_stall  # one alert per stall


def test_markers_moving_between_runs_restart_the_clock() -> None:
    """A job that is progressing between cron ticks is not stalled even if each window looks still."""
    d1 = decide_check(HUNG, {"m": "1"}, WatchState(), now=1000.0, stall_after_s=200)
    d2 = decide_check(HUNG, {"m": "2"}, d1.state, now=1100.0, stall_after_s=200)
    assert d2.exit_code is ExitCode.WARNING
    assert d2.progressed_between_runs == ("m",)
    assert d2.stalled_for_s == pytest.approx(100.0)  # measured from the last run that saw it move


def test_progress_resets_and_rearms_the_alert() -> None:
    d1 = decide_check(
        HUNG, {}, WatchState(last_progress_at=0.0, last_run_at=0.0), now=1000.0, stall_after_s=60
    )
    assert d1.new_stall
    d2 = decide_check(OK, {}, d1.state, now=1010.0, stall_after_s=60)
    assert d2.exit_code is ExitCode.OK and d2.state.alerted_stall_since is None
    d3 = decide_check(HUNG, {}, d2.state, now=1100.0, stall_after_s=60)
    assert d3.exit_code is ExitCode.CRITICAL and d3.new_stall


def test_unknown_keeps_the_clock() -> None:
    state = WatchState(last_progress_at=500.0, last_run_at=900.0, markers={"m": "1"}, runs=3)
    d = decide_check(
        Verdict(Status.UNKNOWN, Stage.UNKNOWN, "no ray"), {}, state, now=1000.0, stall_after_s=60
    )
    assert (
        d.exit_code is ExitCode.UNKNOWN
        and d.state.last_progress_at == 500.0
        and d.state.markers == {"m": "1"}
    )


@pytest.mark.parametrize(
    ("text", "seconds"), [("90", 90), ("90s", 90), ("15m", 900), ("1h30m", 5400), ("2.5m", 150)]
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "ten minutes", "5x", "m5"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


@pytest.mark.parametrize(
    "content", ["{not json", json.dumps({"schema": "someone-else/1"}), json.dumps([1, 2]), "\udcff"]
)
def test_corrupt_or_foreign_state_is_reported_and_replaced(tmp_path: Path, content: str) -> None:
    """A bad state file is a warning and a fresh start, never a crash."""
    path = tmp_path / "state.json"
    path.write_text(content, errors="surrogateescape")
    loaded = load_state(path)
    assert loaded.problem and loaded.state == WatchState()
    save_state(path, WatchState(last_progress_at=1.0))
    assert load_state(path).state.last_progress_at == 1.0


def _hold_lock(
    path: str, ready: multiprocessing.synchronize.Event, release: multiprocessing.synchronize.Event
) -> None:
    with run_lock(Path(path)):
        ready.set()
        release.wait(10)


def test_overlapping_runs_do_not_pile_up(tmp_path: Path) -> None:
    """A second check while one runs is refused at once (the lock is held)."""
    ctx = multiprocessing.get_context("spawn")
    ready, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold_lock, args=(str(tmp_path / "state.json"), ready, release))
    holder.start()
    try:
        assert ready.wait(20)
        t0 = time.monotonic()
        with pytest.raises(LockHeld), run_lock(tmp_path / "state.json"):
            pass
        assert time.monotonic() - t0 < 5
    finally:
        release.set()
        holder.join(10)
    with run_lock(tmp_path / "state.json"):
        pass  # free again once the first run is done


def test_window_moved_is_remembered_only_from_a_run_that_judged() -> None:
    """What lets the next run look without stacks: set by a run that saw work move in its own
    window, cleared by one that did not, and not carried over an UNKNOWN run."""
    d1 = decide_check(OK, {"m": "1"}, WatchState(), now=1000.0, stall_after_s=60, window_moved=True)
    assert d1.state.window_moved
    d2 = decide_check(HUNG, {"m": "1"}, d1.state, now=1060.0, stall_after_s=600, window_moved=False)
    assert not d2.state.window_moved
    d3 = decide_check(OK, {"m": "2"}, d2.state, now=1120.0, stall_after_s=600, window_moved=True)
    unknown = Verdict(Status.UNKNOWN, Stage.UNKNOWN, "no ray")
    d4 = decide_check(unknown, {}, d3.state, now=1180.0, stall_after_s=600, window_moved=True)
    assert d3.state.window_moved and not d4.state.window_moved


def test_window_moved_round_trips_and_old_state_files_mean_a_full_look(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    save_state(path, WatchState(last_progress_at=1.0, last_run_at=1.0, window_moved=True, runs=2))
    assert load_state(path).state.window_moved
    doc = json.loads(path.read_text())
    del doc["window_moved"]  # a state file written before the field existed
    path.write_text(json.dumps(doc))
    loaded = load_state(path)
    assert loaded.problem is None and not loaded.state.window_moved
    doc["window_moved"] = "yes"  # anything but true: the safe side (stacks are taken)
    path.write_text(json.dumps(doc))
    assert not load_state(path).state.window_moved


def _look(at: float = 1000.0) -> StallLook:
    return StallLook(at, HUNG.to_json(), ("10.0.0.1:42",))


def test_a_stall_look_is_kept_while_hung_and_dropped_on_progress_or_unknown() -> None:
    d1 = decide_check(
        HUNG, {"m": "1"}, WatchState(), now=1000.0, stall_after_s=60, stall_look=_look()
    )
    assert d1.state.stall_look == _look()
    d2 = decide_check(OK, {"m": "2"}, d1.state, now=1060.0, stall_after_s=60, stall_look=_look())
    assert d2.state.stall_look is None
    unknown = Verdict(Status.UNKNOWN, Stage.UNKNOWN, "no ray")
    d3 = decide_check(unknown, {}, d1.state, now=1060.0, stall_after_s=60)
    assert d3.state.stall_look is None


def test_a_stall_look_round_trips_and_a_malformed_one_is_dropped(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    save_state(path, WatchState(last_progress_at=1.0, last_run_at=2.0, stall_look=_look(5.0)))
    assert load_state(path).state.stall_look == _look(5.0)
    for bad in (
        {"at": "x", "verdict": {}, "members": []},
        {"at": 1.0, "verdict": [], "members": []},
        {"at": 1.0, "verdict": {}, "members": [1]},
        "look",
        {"at": True, "verdict": {}, "members": []},
    ):
        doc = json.loads(path.read_text())
        doc["stall_look"] = bad
        path.write_text(json.dumps(doc))
        loaded = load_state(path)
        assert loaded.problem is None and loaded.state.stall_look is None, bad


def test_only_an_alerted_stall_young_enough_is_carried() -> None:
    """The carry rule of watchdog/look.py: the stall in progress, after its alert, for CARRY_FOR_S."""
    from slime_hangdoctor.watchdog.look import CARRY_FOR_S, _carriable

    alerted = WatchState(
        last_progress_at=400.0,
        last_run_at=990.0,
        alerted_stall_since=400.0,
        stall_look=_look(900.0),
    )
    assert _carriable(alerted, now=1000.0) == _look(900.0)
    assert _carriable(alerted, now=900.0 + CARRY_FOR_S) is None  # too old: stacks again
    assert _carriable(alerted, now=899.0) is None  # a clock that went back
    before_alert = WatchState(last_progress_at=400.0, last_run_at=990.0, stall_look=_look(900.0))
    assert _carriable(before_alert, now=1000.0) is None
    older_alert = WatchState(
        last_progress_at=950.0,
        last_run_at=990.0,
        alerted_stall_since=400.0,
        stall_look=_look(900.0),
    )
    assert _carriable(older_alert, now=1000.0) is None  # progress since: a new stall, not alerted
    assert _carriable(WatchState(alerted_stall_since=1.0, last_progress_at=1.0), now=1000.0) is None
