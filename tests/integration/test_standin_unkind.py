"""The doctor's engine verdict on a stand-in as unkind as SGLang 0.5.15.post1 (issue 25, items 1-5).

Each test puts the stand-in in a state the real engine shows less of than the old stand-in did, runs
the doctor (`attach --local --sglang-url`) and checks the engine's state and why. The wheel's
file:line for each behaviour is beside it in demo/slime_hangdoctor_demo/sglang/srt/."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
import requests

from slime_hangdoctor.parsers.sglang import parse_metrics
from tests.integration.cli import run_cli
from tests.integration.conftest import Start
from tests.integration.sglang_standin_harness import (
    Standin,
    keep_generating,
    post_in_background,
)


def _generate(s: Standin, max_new_tokens: int = 40) -> dict[str, Any]:
    body = {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": max_new_tokens}}
    return post_in_background(s, "/generate", body)


def _doctor(s: Standin) -> dict[str, Any]:
    proc, _wall = run_cli(
        "attach", "--local", "--sglang-url", s.url, "--json", "--window", "2", timeout=90
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    verdict: dict[str, Any] = json.loads(proc.stdout)
    return verdict


def _engine(verdict: dict[str, Any], url: str) -> dict[str, Any]:
    (engine,) = [e for e in verdict["extra"].get("engines", []) if e["url"] == url]
    return engine


def _evidence(verdict: dict[str, Any]) -> str:
    lines = [verdict["summary"]]
    for f in verdict["findings"]:
        lines += [f["message"], *f["evidence"]]
    for c in verdict["culprits"]:
        lines += [str(c.get("why", "")), *c.get("evidence", [])]
    return "\n".join(lines)


def test_stuck_in_the_first_batch_after_idle_is_stuck_not_paused(start: Start) -> None:
    """Items 1, 2: the first prefill after idle never returns. The LoadSnapshot is published only
    after a prefill batch (scheduler.py:3466), so `/v1/loads` keeps the idle snapshot; the engine
    never counted a token, so no realtime series exists (metrics_collector.py:1203-1217). The
    `/generate` in flight beyond that idle load looked like a pause gate (the old verdict: paused);
    the scheduler frozen in `forward_extend` in both samples says stuck."""
    s = start("--fault", "stuck_prefill")
    _generate(s)
    time.sleep(1.0)
    assert s.get("/v1/loads").json()["loads"][0]["num_running_reqs"] == 0
    metrics = parse_metrics(s.get("/metrics").text)
    assert metrics.decode_tokens_total is None and metrics.prefill_tokens_total is None
    assert metrics.forward_seconds_total is None
    verdict = _doctor(s)
    assert _engine(verdict, s.url)["state"] == "stuck", _evidence(verdict)
    assert "in both samples" in _evidence(verdict) and "pause gate" not in _evidence(verdict)


def test_a_blocked_http_loop_is_the_http_process_not_a_dead_engine(start: Start) -> None:
    """Item 4: the HTTP process is one asyncio loop. A synchronous call on it that never returns
    stalls every endpoint, `/metrics`, `/model_info` and `/health` too, while the process lives and
    the scheduler is idle. The doctor says the HTTP process itself is blocked."""
    s = start("--fault", "blocked_http_loop")
    _generate(s)
    time.sleep(0.5)
    for path in ("/metrics", "/model_info", "/health"):
        with pytest.raises(requests.Timeout):
            s.get(path, timeout=1.0)
    assert s.proc.poll() is None
    verdict = _doctor(s)
    assert _engine(verdict, s.url)["state"] == "unresponsive", _evidence(verdict)
    ours = [c["why"] for c in verdict["culprits"] if c["engine_url"] == s.url]
    assert ours and "the HTTP process itself is blocked" in ours[0], verdict["culprits"]


def test_paused_in_place_reports_no_paused_count_and_is_paused(start: Start) -> None:
    """Item 3: paused `in_place` with requests running, 0.5.15 never sets `num_paused_reqs` nor
    `queues.paused` (both stay 0); the doctor reads the pause from the HTTP middleware's pause
    and continue counts (the only pause indicator 0.5.15 has)."""
    s = start("--step-s", "0.05")
    _generate(s, max_new_tokens=2000)
    time.sleep(0.5)
    assert s.post("/pause_generation", json={"mode": "in_place"}).status_code == 200
    time.sleep(0.6)
    load = s.get("/v1/loads").json()["loads"][0]
    assert load["num_running_reqs"] == 1 and load["queues"]["paused"] == 0, load
    assert parse_metrics(s.get("/metrics").text).paused_reqs == 0.0
    verdict = _doctor(s)
    assert _engine(verdict, s.url)["state"] == "paused", _evidence(verdict)


def test_an_abort_pause_that_cannot_drain_holds_continue_and_reads_stuck(start: Start) -> None:
    """Item 5: `/pause_generation` in mode abort drains while holding `is_pause_cond`
    (tokenizer_manager.py:1697-1709). With the scheduler stuck in a decode step, the drain never
    ends: `/continue_generation` waits for the condition too. The doctor reads the engine as stuck
    (requests in the scheduler, no step, the pause held in flight), not as merely paused."""
    s = start("--fault", "stuck_scheduler")
    _generate(s)
    deadline = time.monotonic() + 10
    while s.get("/v1/loads").json()["loads"][0]["num_running_reqs"] != 1:
        assert time.monotonic() < deadline, "the request never reached the scheduler"
        time.sleep(0.05)
    pause = post_in_background(s, "/pause_generation", {})
    time.sleep(0.5)
    with pytest.raises(requests.Timeout):
        s.post("/continue_generation", json={}, timeout=2.0)
    assert "response" not in pause
    verdict = _doctor(s)
    assert _engine(verdict, s.url)["state"] == "stuck", _evidence(verdict)
    assert "/pause_generation waits in every sample" in _evidence(verdict)


def test_the_doctor_leaves_server_info_answering_after_a_3s_scheduler_stall(start: Start) -> None:
    """Item 7: on 0.5.15 one `/server_info` that times out leaves every later call answering
    `internal_states: []` (communicator.py:38-58 and slime's 2 s patch). The scheduler of a
    generating engine stalls for 3 s (its process stopped) from the doctor's first read on; after
    the doctor's run, `/server_info` still answers with its states, and the verdict says where the
    doctor chose not to call it."""
    import psutil

    s = start()
    stop = threading.Event()

    def traffic() -> None:
        keep_generating(s.url, stop)

    def stall_at_first_read() -> None:
        scheduler = psutil.Process(s.scheduler_pid())
        while not stop.is_set():
            if any(e["path"] == "/model_info" for e in s.logged()):
                scheduler.suspend()
                time.sleep(3.0)
                scheduler.resume()
                return
            time.sleep(0.01)

    workers = [threading.Thread(target=f, daemon=True) for f in (traffic, stall_at_first_read)]
    for w in workers:
        w.start()
    try:
        time.sleep(0.5)
        verdict = _doctor(s)
    finally:
        stop.set()
        for w in workers:
            w.join(30)
    engine = _engine(verdict, s.url)
    assert "sample 1: not called" in engine.get("server_info_calls", ""), engine
    answer = s.get("/server_info", timeout=5.0)
    assert answer.elapsed.total_seconds() < 1.5
    assert len(answer.json()["internal_states"]) == 1, answer.text[:300]
