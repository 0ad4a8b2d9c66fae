"""The SGLang stand-in speaks the protocol of shared/reference/sglang.md (0.5.15 + slime patches)."""

from __future__ import annotations

import datetime
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import requests

from slime_hangdoctor.parsers.sglang import parse_metrics, parse_server_info
from slime_hangdoctor_demo.sglang_server import launch_server
from tests.integration.sglang_standin_harness import (
    Standin,
    free_port,
    running_requests,
    start_standin,
    wait_for,
)

Start = Callable[..., Standin]


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Start]:
    started: list[Standin] = []

    def _start(*args: str, env: dict[str, str] | None = None) -> Standin:
        s = start_standin(tmp_path, *args, env=env)
        started.append(s)
        return s

    yield _start
    for s in started:
        s.stop()


@pytest.fixture
def healthy(start: Start) -> Standin:
    return start()


def background_post(
    s: Standin, path: str, body: dict[str, Any], timeout: float = 60.0
) -> dict[str, Any]:
    """POST in a daemon thread; the result dict gets 'response' or 'error' when it ends."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["response"] = requests.post(s.url + path, json=body, timeout=timeout)
        except requests.RequestException as exc:
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    box["thread"] = thread
    return box


def counters(s: Standin) -> tuple[float | None, ...]:
    m = parse_metrics(s.get("/metrics").text)
    return (
        m.decode_tokens_total,
        m.prefill_tokens_total,
        m.generation_tokens_total,
        m.prompt_tokens_total,
        m.requests_total,
        m.forward_seconds_total,
    )


def pyspy_frames(pid: int) -> str:
    exe = shutil.which("py-spy")
    if exe is None:
        pytest.skip("py-spy not installed")
    out = subprocess.run(
        [exe, "dump", "--pid", str(pid)], check=False, capture_output=True, text=True, timeout=30
    )
    return out.stdout


# --------------------------------------------------------------------------- read endpoints


def test_read_endpoints_have_the_documented_shapes(healthy: Standin) -> None:
    info = healthy.get("/model_info").json()
    assert {
        "model_path",
        "tokenizer_path",
        "is_generation",
        "weight_version",
        "architectures",
    } <= set(info)
    assert info["weight_version"] == "default"
    assert healthy.get("/get_model_info").json() == info

    server = healthy.get("/server_info").json()
    assert server["version"] == "0.5.15.post1"
    assert server["status"] == "ready" and server["max_total_num_tokens"] > 0
    (state,) = server["internal_states"]
    assert {"last_gen_throughput", "memory_usage", "effective_max_running_requests_per_dp"} <= set(
        state
    )
    assert set(state["memory_usage"]) == {"weight", "kvcache", "token_capacity", "graph"}
    assert healthy.get("/get_server_info").json()["internal_states"]

    loads = healthy.get("/v1/loads").json()
    assert set(loads) == {"timestamp", "version", "loads"}
    assert loads["loads"][0]["num_running_reqs"] == 0
    # without `include`, every section (LoadSnapshot.to_dict(include=None)); `core`: none
    assert {"memory", "queues"} <= set(loads["loads"][0])
    assert "queues" in healthy.get("/v1/loads?include=all").json()["loads"][0]
    assert not {"memory", "queues"} & set(healthy.get("/v1/loads?include=core").json()["loads"][0])
    (load,) = healthy.get("/get_load").json()
    assert set(load) == {
        "dp_rank",
        "num_reqs",
        "num_waiting_reqs",
        "num_tokens",
        "num_pending_tokens",
        "ts_tic",
    }

    models = healthy.get("/v1/models").json()
    assert models["object"] == "list" and models["data"][0]["owned_by"] == "sglang"
    assert healthy.get("/get_weight_version").json() == {"weight_version": "default"}

    metrics = healthy.get("/metrics")
    assert metrics.headers["content-type"].startswith("text/plain; version=0.0.4")
    for name in (
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
        "sglang:gen_throughput",
        "sglang:generation_tokens_total",
        "sglang:prompt_tokens_total",
        "sglang:num_requests_total",
    ):
        assert name in metrics.text
    # an engine that never ran a batch has no realtime series (made at the first non-zero inc,
    # metrics_collector.py:1203-1217), and no forward timer without
    # SGLANG_ENABLE_METRICS_DEVICE_TIMER (environ.py:792)
    assert "sglang:realtime_tokens_total" not in metrics.text
    assert "sglang:forward_execution_seconds" not in metrics.text

    missing = healthy.get("/no_such_thing")
    assert (missing.status_code, missing.json()) == (404, {"detail": "Not Found"})
    assert healthy.post("/model_info").status_code == 405
    assert "is deprecated" in healthy.output()


def test_health_is_200_with_an_empty_body(healthy: Standin) -> None:
    for path in ("/health", "/health_generate"):
        r = healthy.get(path, timeout=30)
        assert (r.status_code, r.content) == (200, b"")


def test_process_tree_like_sglang(healthy: Standin) -> None:
    titles = [" ".join(c.cmdline()) for c in healthy.children()]
    assert any(t.startswith("sglang::scheduler_TP0") for t in titles), titles
    assert any(t.startswith("sglang::detokenizer") for t in titles), titles
    scheduler = psutil.Process(healthy.scheduler_pid())
    assert scheduler.name().startswith("sglang::")
    healthy.proc.kill()  # the scheduler dies with its parent (PDEATHSIG)
    healthy.proc.wait(timeout=10)
    assert wait_for(
        lambda: not scheduler.is_running() or scheduler.status() == psutil.STATUS_ZOMBIE
    )


def test_launch_server_in_a_spawn_child_like_slime(tmp_path: Path) -> None:
    port = free_port()
    ctx = multiprocessing.get_context("spawn")
    proc = ctx.Process(
        target=launch_server, args=(["--host", "127.0.0.1", "--port", str(port)],), daemon=True
    )
    proc.start()
    try:
        url = f"http://127.0.0.1:{port}"
        assert wait_for(lambda: _answers(url + "/model_info"), timeout=30)
        children = psutil.Process(proc.pid).children()
        assert any(" ".join(c.cmdline()).startswith("sglang::scheduler") for c in children)
    finally:
        proc.terminate()  # SIGTERM: graceful exit takes the children along
        proc.join(10)
        if proc.is_alive():
            proc.kill()
            proc.join(5)
    assert wait_for(
        lambda: all(not c.is_running() or c.status() == psutil.STATUS_ZOMBIE for c in children)
    )


def test_exit_with_parent_leaves_nothing_behind(tmp_path: Path) -> None:
    """A shell that starts the stand-in and is then killed: the orphan exits with its scheduler."""
    port = free_port()
    cmd = (
        f"{sys.executable} -m slime_hangdoctor_demo.sglang_server --port {port} "
        f"--exit-with-parent > {tmp_path / 'out.log'} 2>&1 & wait"
    )
    shell = subprocess.Popen(["bash", "-c", cmd], start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        assert wait_for(lambda: _answers(url + "/model_info"), timeout=30)
        (server,) = psutil.Process(shell.pid).children()
        family = [server, *server.children()]
        shell.kill()
        shell.wait(10)
        assert wait_for(
            lambda: all(not p.is_running() or p.status() == psutil.STATUS_ZOMBIE for p in family)
        )
    finally:
        try:
            os.killpg(shell.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=1).status_code == 200
    except requests.RequestException:
        return False


# --------------------------------------------------------------------------- generation


def test_counters_advance_only_while_generating(healthy: Standin) -> None:
    before = counters(healthy)
    time.sleep(0.6)
    assert counters(healthy) == before  # idle: nothing moves
    r = healthy.post(
        "/generate",
        json={
            "input_ids": [5] * 12,
            "sampling_params": {"max_new_tokens": 30},
            "return_logprob": True,
        },
    )
    assert r.status_code == 200
    out = r.json()
    meta = out["meta_info"]
    n = meta["completion_tokens"]
    assert n == len(out["output_ids"]) == len(meta["output_token_logprobs"]) and n >= 1
    assert meta["finish_reason"]["type"] in ("length", "stop")
    assert meta["prompt_tokens"] == 12 and meta["weight_version"] == "default"
    after = counters(healthy)
    # decode steps: every token after the first (a one-token answer makes none, and the real
    # engine creates the series only at its first non-zero count: metrics_collector.py:1203-1217)
    assert (after[0] or 0) == (before[0] or 0) + n - 1
    assert after[2] == (before[2] or 0) + n  # generation_tokens_total counts at finish
    assert after[4] == (before[4] or 0) + 1
    time.sleep(0.6)
    assert counters(healthy) == after


def test_generate_rejects_empty_input(healthy: Standin) -> None:
    r = healthy.post("/generate", json={"sampling_params": {}})
    assert r.status_code == 400 and "input_ids" in r.json()["error"]["message"]
    assert healthy.post("/generate").status_code == 422


def test_pause_blocks_generation_until_continue(healthy: Standin) -> None:
    assert healthy.post("/pause_generation").status_code == 422  # body required
    r = healthy.post("/pause_generation", json={})
    assert r.json() == {"message": "Generation paused successfully.", "status": "ok"}
    box = background_post(
        healthy, "/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 3}}
    )
    time.sleep(0.5)
    assert "response" not in box  # queued at the pause gate, not rejected
    r = healthy.post("/continue_generation", json={})
    assert r.json() == {"message": "Generation continued successfully.", "status": "ok"}
    box["thread"].join(15)
    assert box["response"].status_code == 200


def test_flush_abort_release_resume(healthy: Standin) -> None:
    r = healthy.get("/flush_cache")
    assert r.status_code == 200 and r.text.startswith("Cache flushed.")
    r = healthy.post("/abort_request", json={"abort_all": True})
    assert (r.status_code, r.content) == (200, b"")
    for path in ("/release_memory_occupation", "/resume_memory_occupation"):
        r = healthy.post(path, json={"tags": None})
        assert (r.status_code, r.text) == (200, "null")


def test_release_while_busy_crashes_the_engine_like_sglang(healthy: Standin) -> None:
    box = background_post(
        healthy, "/generate", {"input_ids": [1], "sampling_params": {"max_new_tokens": 4000}}
    )
    assert wait_for(lambda: running_requests(healthy) == 1)
    with pytest.raises(requests.ConnectionError):
        healthy.post("/release_memory_occupation", json={})
    assert healthy.proc.wait(timeout=15) != 0
    out = healthy.output()
    assert (
        "Scheduler hit an exception" in out and "should be called only when server is idle" in out
    )
    assert "SIGQUIT received" in out
    box["thread"].join(5)


# --------------------------------------------------------------------------- auth


def test_api_keys(start: Start) -> None:
    s = start("--api-key", "user-key", "--admin-api-key", "admin-key")
    user = {"Authorization": "Bearer user-key"}
    admin = {"Authorization": "bearer admin-key"}  # scheme is case-insensitive
    r = s.get("/model_info")
    assert (r.status_code, r.json()) == (401, {"error": "Unauthorized"})
    assert s.get("/model_info", headers=user).status_code == 200
    assert s.get("/model_info", headers=admin).status_code == 401
    assert s.get("/server_info", headers=user).status_code == 200
    assert s.get("/v1/loads").status_code == 401
    assert s.get("/metrics").status_code == 200  # open
    assert s.get("/health", timeout=30).status_code == 200  # open
    assert s.get("/flush_cache", headers=user).status_code == 401  # admin key set: only it
    assert s.get("/flush_cache", headers=admin).status_code == 200


def test_admin_optional_falls_back_to_api_key(start: Start) -> None:
    s = start("--api-key", "k1")
    assert s.get("/flush_cache").status_code == 401
    assert s.get("/flush_cache", headers={"Authorization": "Bearer k1"}).status_code == 200


# --------------------------------------------------------------------------- faults


def test_never_healthy(start: Start) -> None:
    s = start("--fault", "never_healthy")
    assert s.get("/health", timeout=5).status_code == 503
    assert s.get("/health_generate", timeout=5).status_code == 503
    assert s.get("/model_info").status_code == 200


def test_stuck_scheduler(start: Start) -> None:
    s = start("--fault", "stuck_scheduler", env={"SGLANG_HEALTH_CHECK_TIMEOUT": "2"})
    box = background_post(
        s, "/generate", {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 50}}
    )
    assert wait_for(lambda: running_requests(s) == 1)
    frozen = counters(s)
    info = s.get("/server_info", timeout=10)  # slime patch: [] after SGLANG_SERVER_INFO_TIMEOUT
    assert info.status_code == 200 and parse_server_info(info.content).empty_internal_states
    assert "Timed out getting internal state for /server_info after 2.0s" in s.output()
    assert s.get("/model_info").status_code == 200  # tokenizer only
    assert s.get("/v1/loads").json()["loads"][0]["num_running_reqs"] == 1  # frozen snapshot
    assert counters(s) == frozen
    with pytest.raises(requests.Timeout):
        s.get("/flush_cache", timeout=1.5)  # a scheduler round trip: hangs
    assert s.get("/health", timeout=10).status_code == 503
    assert "Health check failed." in s.output()
    assert "response" not in box
    stack = pyspy_frames(s.scheduler_pid())
    assert "forward_decode" in stack and "event_loop_normal" in stack


def test_skip_weight_sync_hangs_the_group_init(start: Start) -> None:
    s = start("--fault", "skip_weight_sync")
    body = {
        "master_address": "127.0.0.1",
        "master_port": free_port(),
        "rank_offset": 1,
        "world_size": 2,
        "group_name": "weight_update_group",
        "backend": "nccl",
    }
    with pytest.raises(requests.Timeout):
        s.post("/init_weights_update_group", json=body, timeout=2)
    assert wait_for(lambda: "rendezvous" in pyspy_frames(s.scheduler_pid()), timeout=30)
    stack = pyspy_frames(s.scheduler_pid())
    assert "init_custom_process_group" in stack and "init_weights_update_group" in stack
    assert parse_server_info(s.get("/server_info").content).empty_internal_states


def test_hang_update_weights_from_tensor(start: Start) -> None:
    body = {
        "serialized_named_tensors": ["AAAA"],
        "load_format": "flattened_bucket",
        "flush_cache": False,
        "weight_version": "1",
    }
    ok = start()
    r = ok.post("/update_weights_from_tensor", json=body)
    assert r.json()["success"] and "Weight version updated to 1." in r.json()["message"]
    assert ok.get("/model_info").json()["weight_version"] == "1"
    stuck = start("--fault", "hang_update_weights_from_tensor")
    with pytest.raises(requests.Timeout):
        stuck.post("/update_weights_from_tensor", json=body, timeout=2)
    assert "_barrier_tp_cpu_group" in pyspy_frames(stuck.scheduler_pid())
    assert stuck.get("/model_info").json()["weight_version"] == "default"


def test_real_weight_sync_over_gloo(healthy: Standin) -> None:
    import torch
    import torch.distributed as dist

    from slime_hangdoctor_demo.sglang_scheduler import init_custom_process_group

    port = free_port()
    init = background_post(
        healthy,
        "/init_weights_update_group",
        {
            "master_address": "127.0.0.1",
            "master_port": port,
            "rank_offset": 1,
            "world_size": 2,
            "group_name": "slime-pp_0",
            "backend": "nccl",
        },
    )
    pg = init_custom_process_group(
        "gloo", f"tcp://127.0.0.1:{port}", 2, 0, "slime-pp_0", datetime.timedelta(seconds=60)
    )
    try:
        init["thread"].join(60)
        assert init["response"].json()["success"]
        weights = {"layer.w": torch.randn(3, 4).to(torch.bfloat16), "layer.b": torch.ones(5)}
        upd = background_post(
            healthy,
            "/update_weights_from_distributed",
            {
                "names": list(weights),
                "dtypes": ["bfloat16", "float32"],
                "shapes": [list(t.shape) for t in weights.values()],
                "group_name": "slime-pp_0",
                "flush_cache": False,
                "weight_version": "7",
            },
        )
        for tensor in weights.values():
            dist.broadcast(tensor, src=0, group=pg, async_op=True).wait()
        upd["thread"].join(60)
        r = upd["response"]
        assert r.status_code == 200, r.text
        assert (
            r.json()["message"]
            == "Succeeded to update parameter online. Weight version updated to 7."
        )
        assert healthy.get("/get_weight_version").json() == {"weight_version": "7"}
        assert "distributed" in parse_metrics(healthy.get("/metrics").text).weight_load_seconds
        r = healthy.post("/destroy_weights_update_group", json={"group_name": "slime-pp_0"})
        assert r.json()["success"]
        r = healthy.post("/destroy_weights_update_group", json={"group_name": "slime-pp_0"})
        assert (
            r.status_code == 400
            and r.json()["message"] == "The group to be destroyed does not exist."
        )
    finally:
        dist.destroy_process_group(pg)
    assert "init custom process group: master_address=127.0.0.1" in healthy.output()


# --------------------------------------------------------------------------- request log


def test_request_log_records_method_and_path(healthy: Standin) -> None:
    healthy.get("/model_info")
    healthy.post("/abort_request", json={"abort_all": True})
    healthy.get("/v1/loads?include=core")
    logged = [(e["method"], e["path"], e["query"]) for e in healthy.logged()]
    assert logged == [
        ("GET", "/model_info", ""),
        ("POST", "/abort_request", ""),
        ("GET", "/v1/loads", "include=core"),
    ]


# --------------------------------------------------------------------------- issue 18


def test_server_info_stays_poisoned_after_one_timeout_like_0515(healthy: Standin) -> None:
    """Item 1: one /server_info that timed out during a scheduler stall leaves every later one
    answering [] after 2 s, though the scheduler recovered (0.5.15 communicator.py:38-58 + slime's
    patch lines 333-344)."""
    assert parse_server_info(healthy.get("/server_info").content).internal_states_count == 1
    sched = psutil.Process(healthy.scheduler_pid())
    sched.suspend()  # a scheduler stall longer than SGLANG_SERVER_INFO_TIMEOUT
    try:
        tic = time.monotonic()
        stalled = healthy.get("/server_info", timeout=10)
        assert time.monotonic() - tic >= 1.9
        assert parse_server_info(stalled.content).empty_internal_states
    finally:
        sched.resume()
    done = healthy.post(
        "/generate", json={"input_ids": [1], "sampling_params": {"max_new_tokens": 2}}
    )
    assert done.status_code == 200  # the scheduler works again
    for _ in range(2):
        tic = time.monotonic()
        later = healthy.get("/server_info", timeout=10)
        assert parse_server_info(later.content).empty_internal_states  # poisoned
        assert time.monotonic() - tic >= 1.9


def test_http_middleware_counts_pause_and_requests_held_at_the_gate(healthy: Standin) -> None:
    """Item 2: an abort-mode pause is invisible to /v1/loads; the HTTP middleware's series show
    it (utils/common.py:2316-2328), with the wheel's metric names and labels."""
    assert healthy.post("/pause_generation", json={}).status_code == 200
    box = background_post(
        healthy, "/generate", {"input_ids": [1], "sampling_params": {"max_new_tokens": 2}}
    )
    time.sleep(0.5)
    assert healthy.get("/v1/loads").json()["loads"][0]["num_waiting_reqs"] == 0
    page = healthy.get("/metrics").text
    assert 'sglang:http_requests_active{endpoint="/generate",method="POST"} 1.0' in page
    m = parse_metrics(page)
    assert m.http_active["/generate"] == 1 and m.http_active["/metrics"] == 1
    assert m.http_responses_ok["/pause_generation"] == 1
    assert "/continue_generation" not in m.http_requests
    assert healthy.post("/continue_generation", json={}).status_code == 200
    box["thread"].join(15)
    assert box["response"].status_code == 200
    m = parse_metrics(healthy.get("/metrics").text)
    assert m.http_active["/generate"] == 0
    assert m.http_responses_ok["/continue_generation"] == 1


def test_in_place_pause_freezes_the_published_load(healthy: Standin) -> None:
    """Item 3: paused in_place the scheduler loop skips publishing (scheduler.py:1551)."""
    box = background_post(
        healthy, "/generate", {"input_ids": [1], "sampling_params": {"max_new_tokens": 4000}}
    )
    assert wait_for(lambda: running_requests(healthy) == 1)
    assert healthy.post("/pause_generation", json={"mode": "in_place"}).status_code == 200
    time.sleep(0.3)
    first = parse_metrics(healthy.get("/metrics").text).decode_tokens_total
    time.sleep(1.0)
    assert healthy.get("/v1/loads").json()["loads"][0]["num_running_reqs"] == 1  # frozen
    assert parse_metrics(healthy.get("/metrics").text).decode_tokens_total == first
    assert healthy.post("/continue_generation", json={}).status_code == 200
    healthy.post("/abort_request", json={"abort_all": True})
    box["thread"].join(15)


def test_ping_answers_and_ready_is_not_in_0515(healthy: Standin) -> None:
    assert healthy.get("/ping").status_code == 200
    assert healthy.get("/ready").status_code == 404


def test_loads_empty_until_the_first_snapshot(tmp_path: Path) -> None:
    """Item 5: `{"loads": []}` while no LoadSnapshot was published (load_snapshot.py:571-573)."""
    import json

    from slime_hangdoctor_demo.sglang.srt.entrypoints.http_server import ep_get_load, ep_v1_loads
    from slime_hangdoctor_demo.sglang.srt.managers.tokenizer_manager import TokenizerManager
    from slime_hangdoctor_demo.sglang.srt.server_args import parse_args

    tm = TokenizerManager(parse_args(["--port", str(free_port())]))
    status, _, body = ep_v1_loads(tm, "GET", "", b"")
    assert status == 200 and json.loads(body)["loads"] == []
    assert json.loads(ep_get_load(tm, "GET", "", b"")[2]) == []
    tm.snapshot = {"type": "snapshot", "load": {"num_running_reqs": 0}}
    assert len(json.loads(ep_v1_loads(tm, "GET", "", b"")[2])["loads"]) == 1


# --------------------------------------------------------------------------- slime main's calls

ROOT = Path(__file__).resolve().parents[2]
DEMO_JOB = ROOT / "demo" / "slime_hangdoctor_demo" / "job"


def test_update_weights_from_disk_answers_like_0515(healthy: Standin, tmp_path: Path) -> None:
    """slime main's disk weight sync (`SGLangEngine.update_weights_from_disk`): 0.5.15.post1's
    `/update_weights_from_disk` answers 200 `{"success", "message", "num_paused_requests"}` and
    takes the weight version; 400 with the same body when it cannot load the path; 422 without
    `model_path` (a required field of UpdateWeightFromDiskReqInput)."""
    assert healthy.post("/update_weights_from_disk", json={}).status_code == 422
    r = healthy.post("/update_weights_from_disk", json={"model_path": str(tmp_path / "none")})
    assert r.status_code == 400
    assert r.json()["success"] is False
    assert r.json()["message"].startswith("Failed to get weights iterator")
    ckpt = tmp_path / "weight_v000001"
    ckpt.mkdir()
    # as the demo job's disk sync writes a checkpoint (megatron_utils/hf_checkpoint_saver.py):
    # config.json and one pytorch_model.bin (a directory with no weight file is a 400, as above)
    (ckpt / "config.json").write_text("{}")
    import torch

    torch.save({"w": torch.zeros(2)}, ckpt / "pytorch_model.bin")
    assert healthy.post("/pause_generation", json={}).status_code == 200
    body = {"model_path": str(ckpt), "weight_version": "1"}
    r = healthy.post("/update_weights_from_disk", json=body)  # paused: no writer lock to wait on
    assert (r.status_code, r.json()) == (
        200,
        {
            "success": True,
            "message": "Succeeded to update model weights. Weight version updated to 1.",
            "num_paused_requests": 0,
        },
    )
    assert healthy.get("/get_weight_version").json()["weight_version"] == "1"
    assert healthy.post("/continue_generation", json={}).status_code == 200


_ABORT_UNTIL_IDLE = """
import argparse, asyncio, sys
from slime.backends.sglang_utils.server_control import abort_server_until_idle
from slime.utils.http_utils import _client, init_http_client

async def main():
    init_http_client(argparse.Namespace(sglang_api_key=None))
    await abort_server_until_idle(sys.argv[1], retry_interval=1)
    await _client().close()

asyncio.run(main())
"""


def test_server_control_aborts_a_busy_engine_until_idle(healthy: Standin) -> None:
    """The demo job's slime/backends/sglang_utils/server_control.py (slime main's) against the
    stand-in: `POST /abort_request {"abort_all": true}`, then `GET /v1/loads?include=core`, until
    the engine holds no request; the requests in flight end (aborted)."""
    boxes = [
        background_post(
            healthy, "/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 4000}}
        )
        for _ in range(3)
    ]
    assert wait_for(lambda: (running_requests(healthy) or 0) >= 1, timeout=10)
    env = {**os.environ, "PYTHONPATH": f"{DEMO_JOB}{os.pathsep}{ROOT}"}
    proc = subprocess.run(
        [sys.executable, "-c", _ABORT_UNTIL_IDLE, healthy.url],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    for box in boxes:
        box["thread"].join(15)
        assert box["response"].status_code == 200
        assert box["response"].json()["meta_info"]["finish_reason"]["type"] == "abort"
    logged = [(e["method"], e["path"], e["query"]) for e in healthy.logged()]
    abort = logged.index(("POST", "/abort_request", ""))
    assert ("GET", "/v1/loads", "include=core") in logged[abort:]
    loads = healthy.get("/v1/loads?include=core").json()["loads"]
    assert loads[0]["num_running_reqs"] == 0 and loads[0]["num_waiting_reqs"] == 0
