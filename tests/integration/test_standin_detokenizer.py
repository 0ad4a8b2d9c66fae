"""The SGLang stand-in's detokenizer path and fault `detokenizer_stalled` (sglang#36333, #40809).

Generation outputs go scheduler -> `sglang::detokenizer` -> HTTP process as in SGLang 0.5.15.post1
(scheduler.py:4152 `send_to_detokenizer`, detokenizer_manager.py:161-169 `event_loop`,
tokenizer_manager.py:1848-1860 `handle_loop` stamping `last_receive_tstamp`); with the fault the
detokenizer stops inside `_decode_batch_token_id_output`, `/generate` never returns and `/health`
answers 503 with SGLang's line (http_server.py:631-652) while the endpoints the doctor reads answer."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests

from tests.integration.sglang_standin_harness import Standin, start_standin

Start = Callable[..., Standin]
BODY = {"text": "1+1=", "sampling_params": {"max_new_tokens": 6}}


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Start]:
    started: list[Standin] = []

    def _start(*args: str, env: dict[str, str] | None = None) -> Standin:
        s = start_standin(tmp_path, *args, env=env, timeout=60.0)
        started.append(s)
        return s

    yield _start
    for s in started:
        s.stop()


def detokenizer_pid(s: Standin) -> int:
    for child in s.children():
        cmd = child.cmdline()
        if cmd and cmd[0] == "sglang::detokenizer":
            return int(child.pid)
    raise AssertionError("no sglang::detokenizer child")


def pyspy_main_thread(pid: int) -> str:
    exe = shutil.which("py-spy")
    if exe is None:
        pytest.skip("py-spy not installed")
    out = subprocess.run(
        [exe, "dump", "--pid", str(pid)], check=False, capture_output=True, text=True, timeout=30
    ).stdout
    return out.split('"MainThread"', 1)[-1].split("Thread ", 1)[0]


def test_outputs_pass_through_the_detokenizer(start: Start) -> None:
    s = start()
    r = s.post("/generate", json=BODY, timeout=30)
    assert r.status_code == 200, r.text
    # idle, the detokenizer's loop waits for the next batch from the scheduler
    assert "DetokenizerManager.event_loop" in pyspy_main_thread(detokenizer_pid(s))
    assert "_decode_batch_token_id_output" not in pyspy_main_thread(detokenizer_pid(s))
    # a detokenizer that is gone takes the outputs with it: /generate no longer returns
    subprocess.run(["kill", "-STOP", str(detokenizer_pid(s))], check=True)
    try:
        with pytest.raises(requests.exceptions.ReadTimeout):
            s.post("/generate", json=BODY, timeout=5)
    finally:
        subprocess.run(["kill", "-CONT", str(detokenizer_pid(s))], check=True)


def test_detokenizer_stalled_stops_the_heartbeat(start: Start) -> None:
    s = start(
        "--fault", "detokenizer_stalled", "--fault-after-s", "2",
        env={"SGLANG_HEALTH_CHECK_TIMEOUT": "3"},
    )  # fmt: skip
    assert s.post("/generate", json=BODY, timeout=30).status_code == 200
    time.sleep(2.5)
    with pytest.raises(requests.exceptions.ReadTimeout):
        s.post("/generate", json=BODY, timeout=5)
    stack = pyspy_main_thread(detokenizer_pid(s))
    assert "DetokenizerManager._decode_batch_token_id_output" in stack
    assert "DetokenizerManager.event_loop" in stack
    assert s.get("/health", timeout=30).status_code == 503
    assert "Server couldn't get a response from detokenizer for last 3 seconds" in s.output()
    # what the doctor reads still answers; the scheduler has nothing left to run
    loads = s.get("/v1/loads", timeout=5).json()["loads"][0]
    assert loads["num_running_reqs"] == 0 and loads["num_waiting_reqs"] == 0
    assert s.get("/ping", timeout=5).status_code == 200
    assert s.get("/model_info", timeout=5).status_code == 200
