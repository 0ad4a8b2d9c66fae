"""The stand-in serves SGLang 0.5.23's weight-update session (issue 35 items 2 and 6) as 0.5.23
does (entrypoints/http_server.py:1458-1485, managers/tokenizer_control_mixin.py:471-500,
managers/scheduler_components/weight_updater.py:309-335; file:line beside each behaviour in
demo/slime_hangdoctor_demo/sglang/srt/): one session at a time (400 with SGLang's message otherwise),
the model-update writer lock taken unless the engine is paused (a `/generate` in flight holds the
begin), no server-side timeout. An engine whose scheduler never returns from `begin_weight_update`
holds the call in flight, and the doctor places that engine in `weight_sync`."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.integration.cli import run_cli
from tests.integration.conftest import Start
from tests.integration.sglang_standin_harness import (
    post_in_background,
    running_requests,
    wait_for,
)


def test_one_session_at_a_time_with_sglangs_answers(start: Start) -> None:
    s = start()
    first = s.post("/begin_weight_update", json={"selector": "all"})
    assert (first.status_code, first.json()) == (200, {"success": True, "message": "Success"})
    again = s.post("/begin_weight_update", json={"selector": "all"})
    assert again.status_code == 400 and "already open" in again.json()["message"]
    assert s.post("/update_weight_version", json={"new_version": "7"}).status_code == 200
    assert s.get("/model_info").json()["weight_version"] == "7"
    assert s.post("/end_weight_update", json={}).status_code == 200
    ended = s.post("/end_weight_update", json={})
    assert ended.status_code == 400 and "no weight-update session" in ended.json()["message"]
    assert s.post("/begin_weight_update", json={"selector": "nope"}).status_code == 422


def test_the_begin_waits_for_a_generate_in_flight_unless_paused(start: Start) -> None:
    """Not paused: the writer side of the update lock, behind every `/generate` that holds the
    reader side (tokenizer_control_mixin.py:480-481)."""
    s = start("--step-s", "0.05")
    gen = post_in_background(
        s, "/generate", {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 200}}
    )
    # the generate holds the reader side from the tokenizer on; once the scheduler runs it, it is
    # surely in flight (a loaded 2-core CI box took over 10 s for a stand-in's first batch)
    assert wait_for(lambda: running_requests(s) == 1), "the generate never reached the scheduler"
    begin = post_in_background(s, "/begin_weight_update", {"selector": "all"})
    time.sleep(0.5)
    assert "response" not in gen, "the generate ended before the check: inconclusive"
    assert "response" not in begin, "the begin did not wait for the generate in flight"
    gen["thread"].join(30)
    begin["thread"].join(30)
    assert gen["response"].status_code == 200 and begin["response"].status_code == 200


def test_a_scheduler_stuck_in_begin_holds_the_call_and_is_weight_sync(
    start: Start, tmp_path: Path
) -> None:
    """The doctor's read of this engine (`attach --local`: on a shared machine other jobs' engines
    may be in the same run, so the engine's own read is checked, not the job's verdict): the call
    is held in every sample and places the engine, and its scheduler's stack, in weight_sync (the
    job's verdict on such an engine: tests/unit/test_analysis_miles_session.py, recorded)."""
    from slime_hangdoctor.analysis.readers.sglang_http import read_engines
    from slime_hangdoctor.analysis.world import build_world
    from slime_hangdoctor.pipeline import analyse_bundle
    from slime_hangdoctor.verdict import Stage

    s = start("--fault", "stuck_begin_weight_update", "--fault-after-s", "0")
    begin = post_in_background(s, "/begin_weight_update", {"selector": "all"})
    time.sleep(1.0)
    assert "response" not in begin and "error" not in begin
    assert s.get("/model_info").status_code == 200  # the HTTP process itself answers
    out = tmp_path / "bundle"
    proc, _wall = run_cli(
        "attach", "--local", "--sglang-url", s.url, "--json", "--window", "2", "--bundle", str(out),
        timeout=90,
    )  # fmt: skip
    assert "Traceback" not in proc.stderr, proc.stderr
    assert json.loads(proc.stdout)["schema"] == "slime-hangdoctor.verdict/1"
    analysed = analyse_bundle(out)
    world = build_world(analysed.snapshot, analysed.topology)
    (engine,) = [e for e in read_engines(world) if e.url == s.url]
    assert engine.calls_held == ("/begin_weight_update",) and engine.call_stage is Stage.WEIGHT_SYNC
    (scheduler,) = engine.schedulers
    assert scheduler.latest is not None and scheduler.latest.stage is Stage.WEIGHT_SYNC
