"""A healthy demo job whose engine had its `/server_info` poisoned by an earlier doctor probe during
a scheduler stall (issue 18, item 1): `attach` still says "progressing" and `check` exits 0.

On SGLang 0.5.15 + slime's patch, a `/server_info` that times out (2 s) leaves the queueing
communicator's `_result_event` set (communicator.py:38-58): every later call answers
`internal_states: []` after 2 s, though the scheduler recovered. The SGLang stand-in reproduces
that; the stall is a real one (the engine's scheduler process is stopped for 3 s), and the call
that poisons the endpoint is a plain `/server_info` GET (the doctor's own probe skips it on a busy
0.5.15 engine since issue 25 item 7; at idle, as in `_poison_standin`, it still poisons it).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from slime_hangdoctor.parsers.sglang import parse_server_info
from slime_hangdoctor_demo.launch import DemoRun
from tests.integration.cli import run_cli
from tests.live_jobs import NONE_JOB
from tests.live_pool import LivePool, Slot, job_part

pytestmark = [pytest.mark.ray, pytest.mark.slow]

STALL_S = 3.0


def _server_info(url: str) -> tuple[float, bytes | None]:
    """One `/server_info` GET with a 2.5 s timeout, as any caller makes it (slime, an operator, an
    older doctor); returns its elapsed seconds and body. The doctor's own probe no longer sends it
    while the first reads show the scheduler busy or silent (issue 25 item 7), so it may not be
    the one that poisons a generating engine."""
    import requests

    tic = time.monotonic()
    try:
        body: bytes | None = requests.get(url + "/server_info", timeout=2.5).content
    except requests.RequestException:
        body = None
    return time.monotonic() - tic, body


def _poison(run: DemoRun, tmp_path: Path) -> str:
    """Stop engine 0's scheduler for STALL_S while a /server_info call waits; returns its URL."""
    url = run.engine_urls()[0]
    scheduler = psutil.Process(run.processes()["engine 0 scheduler"])
    scheduler.suspend()
    try:
        elapsed, body = _server_info(url)
    finally:
        time.sleep(max(0.0, STALL_S - elapsed))
        scheduler.resume()
    assert body is not None and parse_server_info(body).empty_internal_states
    time.sleep(2.0)  # the scheduler runs again: the job makes progress
    elapsed, body = _server_info(url)
    assert body is not None and parse_server_info(body).empty_internal_states, "not poisoned"
    assert elapsed >= 1.9
    return url


def _engine_state(verdict: dict[str, Any], url: str) -> str:
    states = {e["url"]: e["state"] for e in verdict["extra"].get("engines", [])}
    return states[url]


@job_part(NONE_JOB, "poisoned", order=1)
def _poisoned_server_info(
    run: DemoRun, slot: Slot, work: Path
) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str], int, str]:
    """Engine 0 of the healthy demo job gets a poisoned /server_info; the doctor attaches, and a
    cron check runs. Returns (attach run, check run, train steps done, engine URL). The last part
    of the shared job: the engine stays poisoned."""
    head = slot.head
    url = _poison(run, work)
    proc, _wall = run_cli(
        "attach", head.dashboard_url, "--json", "--window", "3", "--timeout", "25", timeout=60
    )
    check, _wall = run_cli(
        "check",
        head.dashboard_url,
        "--json",
        "--window",
        "2",
        "--timeout",
        "25",
        "--state-file",
        str(work / "state.json"),
        "--stall-after",
        "60s",
        timeout=60,
    )
    return proc, check, run.steps_done(), url


@pytest.mark.live(f"{NONE_JOB}/poisoned")
def test_attach_and_check_stay_ok_on_a_poisoned_server_info(live_pool: LivePool) -> None:
    # GIVEN a healthy demo job, one of whose engines has a poisoned /server_info
    # WHEN the doctor attaches, and a cron check runs
    proc, check, steps, url = live_pool.result(f"{NONE_JOB}/poisoned")
    # THEN both say the job progresses, and the engine is not read as unresponsive
    assert "Traceback" not in proc.stderr + check.stderr, proc.stderr + check.stderr
    verdict = json.loads(proc.stdout)
    assert (verdict["status"], proc.returncode) == ("progressing", 0), verdict["summary"]
    assert _engine_state(verdict, url) not in ("unresponsive", "stuck", "dead"), verdict["extra"]
    rules = {f["rule"] for f in verdict["findings"]}
    assert not any(r.startswith("engine-unresponsive") for r in rules), verdict["findings"]
    # the doctor read the poisoned endpoint (idle engine), or did not call it (busy, issue 25 item 7)
    assert rules & {"engine-server-info-poisoned", "engine-server-info-probe"}, verdict["findings"]
    checked = json.loads(check.stdout)
    assert (check.returncode, checked["status"]) == (0, "progressing"), checked["summary"]
    assert steps >= 3


def _poison_standin(url: str, scheduler_pid: int, tmp_path: Path) -> None:
    scheduler = psutil.Process(scheduler_pid)
    scheduler.suspend()
    try:
        elapsed, body = _server_info(url)
    finally:
        time.sleep(max(0.0, STALL_S - elapsed))
        scheduler.resume()
    assert body is not None and parse_server_info(body).empty_internal_states


@pytest.mark.parametrize("busy", [False, True])
def test_a_poisoned_engine_alone_is_never_read_unresponsive(tmp_path: Path, busy: bool) -> None:
    """The same poisoning on a lone stand-in (no Ray): idle, the engine is "unknown" with the
    poisoned-endpoint finding (it used to be "unresponsive", a culprit); generating, "busy"."""
    import threading

    from tests.integration.sglang_standin_harness import keep_generating, start_standin

    s = start_standin(tmp_path)
    stop = threading.Event()

    def traffic() -> None:
        keep_generating(s.url, stop)  # until the stand-in is stopped

    try:
        _poison_standin(s.url, s.scheduler_pid(), tmp_path)
        worker = threading.Thread(target=traffic, daemon=True)
        if busy:
            worker.start()
            time.sleep(1.0)
        proc, _wall = run_cli(
            "attach", "--local", "--sglang-url", s.url, "--json", "--window", "2", timeout=60
        )
    finally:
        stop.set()
        s.stop()
    assert "Traceback" not in proc.stderr, proc.stderr
    verdict = json.loads(proc.stdout)
    state = _engine_state(verdict, s.url)
    assert state == ("busy" if busy else "unknown"), verdict["extra"]
    assert not any(c.get("engine_url") == s.url for c in verdict["culprits"]), verdict["culprits"]
    # idle: the doctor's /server_info finds the endpoint poisoned; generating: it is not called
    # (one timeout would poison it, issue 25 item 7), and the verdict says so
    expected = "engine-server-info-probe" if busy else "engine-server-info-poisoned"
    assert expected in {f["rule"] for f in verdict["findings"]}, verdict["findings"]
    if busy:
        assert (verdict["status"], proc.returncode) == ("progressing", 0), verdict["summary"]
