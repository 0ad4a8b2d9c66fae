"""The demo job (slime_hangdoctor/demo/job) on a real local Ray head: healthy run makes progress,
its processes look like a slime job's, and `DemoRun.stop` leaves nothing behind."""

from __future__ import annotations

import time
from pathlib import Path

import psutil
import pytest
import requests

from slime_hangdoctor.demo.launch import ARMED_TEXT, start_demo
from tests.integration.demo_job_harness import marked_processes

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(240)]

EXPECTED_PROCESSES = {
    "driver",
    "rollout_manager",
    "train rank 0",
    "train rank 1",
    "engine 0 actor",
    "engine 1 actor",
    "engine 0 server",
    "engine 1 server",
    "engine 0 scheduler",
    "engine 1 scheduler",
}


def _title(pid: int) -> str:
    return psutil.Process(pid).cmdline()[0]


def test_healthy_job_makes_progress_and_stops_cleanly(tmp_path: Path) -> None:
    run = start_demo("none", workdir=tmp_path)
    submission_id = run.submission_id
    try:
        run.wait_until_ready(timeout=120)
        first = run.steps_done()
        assert first >= 3

        deadline = time.monotonic() + 60
        while run.steps_done() <= first and time.monotonic() < deadline:
            time.sleep(0.5)
        assert run.steps_done() > first, run.logs()[-3000:]
        assert run.status() == "RUNNING"
        assert ARMED_TEXT not in run.logs()

        procs = run.processes()
        assert set(procs) >= EXPECTED_PROCESSES, procs
        assert _title(procs["rollout_manager"]).startswith("ray::RolloutManager")
        assert _title(procs["engine 0 actor"]).startswith("ray::SGLangEngine")
        assert _title(procs["train rank 1"]).startswith("ray::MegatronTrainRayActor")
        assert _title(procs["engine 1 scheduler"]) == "sglang::scheduler_TP0"
        assert psutil.Process(procs["engine 1 server"]).ppid() == procs["engine 1 actor"]

        urls = run.engine_urls()
        assert sorted(urls) == [0, 1]
        for url in urls.values():
            port = int(url.rsplit(":", 1)[1])
            assert port >= 15000
            # each sync after a step bumps the weight version every engine reports
            answer = requests.get(f"{url}/get_weight_version", timeout=5).json()
            assert int(answer["weight_version"]) >= 2

        marked = set(marked_processes(submission_id))
        assert {procs["driver"], procs["engine 1 actor"], procs["engine 1 scheduler"]} <= marked
    finally:
        run.stop()
    assert marked_processes(submission_id) == []
