"""The SGLang stand-in with several TP ranks (`--tp-size N`): N scheduler processes titled as
SGLang 0.5.15.post1 titles them, TP rank 0 receiving the requests and broadcasting them to the others
with `broadcast_pyobj` over a real gloo group, one all-reduce per batch, the weight-update group
joined by every rank at `rank_offset + tp_rank`, and the fault `prefetch_check_diverged`
(sglang#30760: rank 0 in HiCache's prefetch-check all_reduce, rank 1 in `broadcast_pyobj`)."""

from __future__ import annotations

import datetime
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.integration.sglang_standin_harness import Standin, free_port, start_standin

Start = Callable[..., Standin]


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Start]:
    started: list[Standin] = []

    def _start(*args: str) -> Standin:
        s = start_standin(tmp_path, *args, timeout=60.0)
        started.append(s)
        return s

    yield _start
    for s in started:
        s.stop()


def schedulers(s: Standin) -> dict[str, int]:
    """Title -> pid of the stand-in's scheduler children."""
    out: dict[str, int] = {}
    for child in s.children():
        cmd = child.cmdline()
        if cmd and cmd[0].startswith("sglang::scheduler"):
            out[cmd[0]] = int(child.pid)
    return out


def pyspy_frames(pid: int) -> str:
    exe = shutil.which("py-spy")
    if exe is None:
        pytest.skip("py-spy not installed")
    out = subprocess.run(
        [exe, "dump", "--pid", str(pid)], check=False, capture_output=True, text=True, timeout=30
    )
    return out.stdout


def wait_for(predicate: Callable[[], bool], timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return predicate()


def generate(s: Standin, timeout: float = 30.0) -> requests.Response:
    body = {"text": "1+1=", "sampling_params": {"max_new_tokens": 6}}
    return s.post("/generate", json=body, timeout=timeout)


def test_tp2_runs_two_titled_ranks_that_broadcast_the_requests(start: Start) -> None:
    s = start("--tp-size", "2")
    assert wait_for(lambda: len(schedulers(s)) == 2)
    ranks = schedulers(s)
    assert set(ranks) == {"sglang::scheduler_TP0", "sglang::scheduler_TP1"}
    for _ in range(3):
        r = generate(s)
        assert r.status_code == 200, r.text
        assert r.json()["meta_info"]["completion_tokens"] >= 1
    # idle: rank 1 waits in torch's real broadcast under broadcast_pyobj <- recv_requests
    assert wait_for(lambda: "broadcast_pyobj" in pyspy_frames(ranks["sglang::scheduler_TP1"]))
    stack = pyspy_frames(ranks["sglang::scheduler_TP1"])
    assert "broadcast (torch/distributed/distributed_c10d.py" in stack
    assert "SchedulerRequestReceiver.recv_requests" in stack


def test_tp2_every_rank_joins_the_weight_update_group(start: Start) -> None:
    import torch
    import torch.distributed as dist

    from slime_hangdoctor_demo.sglang_scheduler import init_custom_process_group

    s = start("--tp-size", "2")
    port = free_port()
    box: dict[str, Any] = {}

    def post(path: str, body: dict[str, Any], key: str) -> threading.Thread:
        def run() -> None:
            box[key] = s.post(path, json=body, timeout=60)

        t = threading.Thread(target=run, daemon=True)
        t.start()
        return t

    # slime: world size = engines * rollout_num_gpus_per_engine + 1, engine i at rank_offset
    # 1 + i * tp; each TP rank joins at rank_offset + tp_rank
    init = post(
        "/init_weights_update_group",
        {
            "master_address": "127.0.0.1",
            "master_port": port,
            "rank_offset": 1,
            "world_size": 3,
            "group_name": "slime-tp2-pp_0",
            "backend": "nccl",
        },
        "init",
    )
    pg = init_custom_process_group(
        "gloo", f"tcp://127.0.0.1:{port}", 3, 0, "slime-tp2-pp_0", datetime.timedelta(seconds=60)
    )
    init.join(60)
    assert box["init"].json()["success"]
    weight = torch.ones(4)
    upd = post(
        "/update_weights_from_distributed",
        {
            "names": ["w"],
            "dtypes": ["float32"],
            "shapes": [[4]],
            "group_name": "slime-tp2-pp_0",
            "flush_cache": False,
            "weight_version": "2",
        },
        "upd",
    )
    dist.broadcast(weight, src=0, group=pg, async_op=True).wait()  # both ranks receive it
    upd.join(60)
    assert box["upd"].status_code == 200, box["upd"].text
    assert s.get("/get_weight_version").json() == {"weight_version": "2"}


def test_prefetch_check_diverged_leaves_rank0_in_all_reduce_and_rank1_in_broadcast(
    start: Start,
) -> None:
    s = start("--tp-size", "2", "--fault", "prefetch_check_diverged")
    assert wait_for(lambda: len(schedulers(s)) == 2)
    ranks = schedulers(s)
    with pytest.raises(requests.Timeout):
        generate(s, timeout=3)
    rank0 = ranks["sglang::scheduler_TP0"]
    rank1 = ranks["sglang::scheduler_TP1"]
    assert wait_for(lambda: "check_prefetch_progress" in pyspy_frames(rank0))
    stack0 = pyspy_frames(rank0)
    for frame in (
        "all_reduce (torch/distributed/distributed_c10d.py",
        "HiRadixCache._all_reduce_attn_groups",
        "HiRadixCache.can_terminate_prefetch",
        "Scheduler._get_new_batch_prefill_raw",
    ):
        assert frame in stack0
    stack1 = pyspy_frames(rank1)
    assert "broadcast_pyobj" in stack1 and "check_prefetch_progress" not in stack1
    time.sleep(2.0)  # for ever: the same two stacks later
    assert "check_prefetch_progress" in pyspy_frames(rank0)
    assert "broadcast_pyobj" in pyspy_frames(rank1)


def test_tp_rank_killed_at_launch_leaves_rank0_in_the_rendezvous_and_the_launcher_waiting(
    tmp_path: Path,
) -> None:
    """sglang PR#20287's shape: the last TP rank is SIGKILLed while it loads; rank 0 waits in the
    TP group's rendezvous, the HTTP process (an SGLang before the fix) on rank 0's ready pipe, and
    the engine never listens; the last rank's title is simply missing."""
    import os
    import signal
    import sys

    import psutil

    from tests.integration.sglang_standin_harness import pythonpath

    port = free_port()
    env = {**os.environ, "PYTHONPATH": pythonpath()}
    proc = subprocess.Popen(  # noqa: S603 - our own module
        [
            sys.executable,
            "-m",
            "slime_hangdoctor_demo.sglang_server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--tp-size",
            "2",
            "--fault",
            "tp_rank_killed_at_launch",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        server = psutil.Process(proc.pid)

        def titles() -> dict[str, int]:
            out: dict[str, int] = {}
            for child in server.children():
                try:
                    cmd = child.cmdline()
                except psutil.Error:
                    continue
                if cmd and cmd[0].startswith("sglang::"):
                    out[cmd[0]] = child.pid
            return out

        assert wait_for(
            lambda: (
                "init_process_group" in pyspy_frames(titles().get("sglang::scheduler_TP0", 0))
                if "sglang::scheduler_TP0" in titles()
                else False
            ),
            timeout=40,
        )
        time.sleep(3.0)  # the 0.5.15.post1 launcher would have seen the death by now (5 s poll)
        assert proc.poll() is None
        assert "sglang::scheduler_TP1" not in titles()
        assert "_wait_for_scheduler_ready_before_pr20287" in pyspy_frames(proc.pid)
        with pytest.raises(requests.ConnectionError):
            requests.get(f"http://127.0.0.1:{port}/health", timeout=2)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)


def test_tp_rank_killed_mid_batch_takes_the_engine_down(start: Start) -> None:
    """SGLang 0.5.15.post1's SubprocessWatchdog: a TP rank's SIGKILL ends the whole engine."""
    s = start("--tp-size", "2", "--fault", "tp_rank_killed")
    with pytest.raises(requests.RequestException):
        generate(s, timeout=10)
    assert wait_for(lambda: s.proc.poll() is not None, timeout=20)
    assert "Subprocess sglang::scheduler_TP1" in s.output() and "exit code -9" in s.output()


def test_running_timeout_diverged_splits_the_tp_group(start: Start) -> None:
    """sglang#27221 with 4 TP ranks: ranks 2 and 3 abort the running batch on their own clocks and
    wait in broadcast_pyobj; ranks 0 and 1 wait for the decode's all_reduce (posted on the device
    group, NCCL-like: their frame is the result's sync in process_batch_result); for ever."""
    s = start("--tp-size", "4", "--fault", "running_timeout_diverged")
    assert wait_for(lambda: len(schedulers(s)) == 4)
    ranks = schedulers(s)
    with pytest.raises(requests.Timeout):
        generate(s, timeout=5)
    for rank in (0, 1):
        pid = ranks[f"sglang::scheduler_TP{rank}"]
        assert wait_for(lambda pid=pid: "process_batch_result" in pyspy_frames(pid))
        assert "broadcast_pyobj" not in pyspy_frames(pid)
    for rank in (2, 3):
        stack = pyspy_frames(ranks[f"sglang::scheduler_TP{rank}"])
        assert "broadcast_pyobj" in stack and "process_batch_result" not in stack
    time.sleep(2.0)
    assert "process_batch_result" in pyspy_frames(ranks["sglang::scheduler_TP0"])
    assert "broadcast_pyobj" in pyspy_frames(ranks["sglang::scheduler_TP3"])


def test_an_engine_on_two_nodes_runs_rank_1_under_a_launcher_with_a_dummy_health_server(
    start: Start, tmp_path: Path
) -> None:
    """SGLang's `--nnodes 2` (issue 45 item 2): node rank 1 runs its TP rank and the dummy health
    server only (0.5.15.post1 entrypoints/engine.py:835-862); its rank meets rank 0's at
    --dist-init-addr. With `tp_rank_stuck` live, that rank never leaves its decode forward and
    rank 0 waits at the batch's result."""
    import os
    import sys

    import psutil

    from tests.integration.sglang_standin_harness import pythonpath

    dist, port1 = f"127.0.0.1:{free_port()}", free_port()
    shared = ("--tp-size", "2", "--nnodes", "2", "--dist-init-addr", dist)
    shared += ("--fault", "tp_rank_stuck")
    node1 = subprocess.Popen(  # noqa: S603 - the stand-in, fixed argv
        [sys.executable, "-m", "slime_hangdoctor_demo.sglang_server", "--port", str(port1)]
        + [*shared, "--node-rank", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": pythonpath()},
        start_new_session=True,
    )
    try:
        node0 = start(*shared, "--node-rank", "0")
        dummy = f"http://127.0.0.1:{port1}"
        assert wait_for(lambda: _status(dummy + "/health") == 200)
        assert _status(dummy + "/health_generate") == 200
        assert _status(dummy + "/server_info") == 404  # no API on node rank 1
        kids = {c.cmdline()[0]: c.pid for c in psutil.Process(node1.pid).children()}
        assert set(kids) == {"sglang::scheduler_TP1"}  # no detokenizer there
        assert set(schedulers(node0)) == {"sglang::scheduler_TP0"}
        launcher = pyspy_frames(node1.pid)
        assert "wait_for_completion" in launcher and "_launch_subprocesses" in launcher
        assert "health-check-server" in launcher
        box: dict[str, Any] = {}

        def ask() -> None:
            try:
                box["r"] = generate(node0, 60)
            except requests.RequestException:
                pass  # the stand-in stopped at the test's end

        threading.Thread(target=ask, daemon=True).start()
        rank1, rank0 = kids["sglang::scheduler_TP1"], schedulers(node0)["sglang::scheduler_TP0"]
        assert wait_for(lambda: "forward_decode" in pyspy_frames(rank1), timeout=30)
        assert "Scheduler.process_batch_result" in pyspy_frames(rank0)
        assert "r" not in box  # the request never finishes
    finally:
        node1.kill()
        node1.wait(timeout=10)


def _status(url: str) -> int | None:
    try:
        return requests.get(url, timeout=2).status_code
    except requests.RequestException:
        return None
