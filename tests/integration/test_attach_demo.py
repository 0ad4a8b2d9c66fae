"""`attach` against the live demo slime job: every fault's verdict names the right stage and culprit.

Real Ray heads (with dashboard) serve the whole session's live pool (tests/live_pool.py), two
fault jobs at a time; each fault is a real job submitted through the Job API, diagnosed by the real CLI in a subprocess (py-spy, HTTP to the SGLang stand-ins, Ray's
state API), then stopped. The same live run also checks that the injected hang holds where
shared/reference/slime.md §8 says it would (every frame signature of the fault, by py-spy, plus
the fault's own checks in LIVE_CHECKS) and that stopping the job leaves none of its processes:
one demo job per fault for the whole suite (CI time).
"""

from __future__ import annotations

import functools
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
import requests

from slime_hangdoctor.bundle import open_bundle
from slime_hangdoctor.load import load_snapshot
from slime_hangdoctor.parsers.kernel import KERNEL
from slime_hangdoctor.parsers.sglang import HTTP_ANSWERS, RouterWorkers
from slime_hangdoctor.parsers.sockets import SOCKETS
from slime_hangdoctor_demo.faults import FAULTS
from slime_hangdoctor_demo.launch import ARMED_TEXT, DemoRun, start_demo
from tests.integration.cli import run_cli
from tests.integration.demo_job_harness import (
    check_all_signatures,
    have_pyspy,
    marked_processes,
    pyspy_threads,
    thread_has_frames,
)
from tests.live_jobs import NONE_JOB, STALL_JOB
from tests.live_pool import LivePool, Slot, add_scenario, job_part, scenario

# slime's _start_router log line: "Router launched at HOST:PORT, Prometheus port: P"
_ROUTER_RE = re.compile(r"Router launched at ([\d.]+):(\d+)")

pytestmark = [pytest.mark.ray, pytest.mark.slow]

WINDOW_S = 3.0
TIMEOUT_S = 25.0


def attach(
    address: str, *extra: str, timeout: float = TIMEOUT_S
) -> tuple[int, dict[str, Any], str, float]:
    """Run the real CLI; returns (exit code, verdict JSON, stderr, wall seconds)."""
    proc, wall = run_cli(
        "attach",
        address,
        "--json",
        "--window",
        str(WINDOW_S),
        "--timeout",
        str(TIMEOUT_S),
        *extra,
        timeout=timeout + 30,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout), proc.stderr, wall


def _check_culprit(verdict: dict[str, Any], run: DemoRun, fault: str) -> None:
    expected = FAULTS[fault].expected
    if expected.culprit_role is None:
        assert verdict["culprits"] == [], verdict["culprits"]
        return
    culprit = verdict["culprits"][0]
    assert culprit["role"] == expected.culprit_role, verdict["summary"]
    if expected.culprit_rank is not None:
        assert culprit["rank"] == expected.culprit_rank, culprit
    if expected.culprit_engine is not None:
        url = run.engine_urls()[expected.culprit_engine]
        assert culprit["engine_url"] == url, (culprit, run.engine_urls())
    if expected.culprit_engines:
        urls = {run.engine_urls()[i] for i in expected.culprit_engines}
        assert {c["engine_url"] for c in verdict["culprits"]} == urls, verdict["culprits"]
    assert culprit["pid"] and culprit["node_ip"], culprit


def _assert_stuck(run: DemoRun) -> None:
    """No step completes over 2 s and the job is still RUNNING."""
    steps = run.steps_done()
    time.sleep(2.0)
    assert run.steps_done() == steps
    assert run.status() == "RUNNING"


def _weight_sync_engine_missing(run: DemoRun, matched: dict[str, str]) -> None:
    _assert_stuck(run)
    rank0 = next(v for k, v in matched.items() if k.startswith("train rank 0"))
    assert "distributed_c10d.py" in rank0
    assert "update_weight_from_distributed.py" in rank0
    # the healthy engine is not stuck in the sync: its scheduler waits for requests
    threads = pyspy_threads(run.processes()["engine 0 scheduler"])
    assert any(thread_has_frames(t, ("recv_requests", "event_loop_normal")) for t in threads)


def _reward_hang(run: DemoRun, _matched: dict[str, str]) -> None:
    _assert_stuck(run)
    # CPU-hot: the loop thread is seen running (not idle) in at least one of a few dumps
    rm = run.processes()["rollout_manager"]
    for _ in range(5):
        threads = pyspy_threads(rm)
        if any("_start_loop" in str(t.get("thread_name")) and t.get("active") for t in threads):
            return
        time.sleep(0.2)
    raise AssertionError("the reward loop thread was never seen running")


def _colocate_update_hang(run: DemoRun, _matched: dict[str, str]) -> None:
    assert run.steps_done() >= 1  # it trained (and synced) before it stalled
    assert "release_memory_occupation" in run.logs()  # colocate: engines offload


def _train_rank_stuck(run: DemoRun, _matched: dict[str, str]) -> None:
    assert run.steps_done() == 0


def _checkpoint_slow_storage(run: DemoRun, _matched: dict[str, str]) -> None:
    """The save goes on: no train step over 2 s, while rank 0's storage write bytes grow."""
    rank0 = run.processes()["train rank 0"]
    before = psutil.Process(rank0).io_counters().write_bytes
    _assert_stuck(run)
    assert psutil.Process(rank0).io_counters().write_bytes - before >= 1 << 20


def _checkpoint_stuck_storage(run: DemoRun, _matched: dict[str, str]) -> None:
    """The save's write sleeps in pipe_write and moves no byte over 2 s."""
    rank0 = psutil.Process(run.processes()["train rank 0"])
    before = rank0.io_counters()
    _assert_stuck(run)
    after = rank0.io_counters()
    assert (after.write_chars, after.write_bytes) == (before.write_chars, before.write_bytes)
    with open(f"/proc/{rank0.pid}/wchan") as fh:
        assert fh.read().strip() in ("pipe_write", "anon_pipe_write")  # Linux >= 6.14: anon_


# The healthy job's own checks (what `demo --fault none` must look like): steps advance, no fault
# armed, the processes are titled as slime's are, every engine serves its weight version.
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
    return str(psutil.Process(pid).cmdline()[0])


def _healthy(run: DemoRun, _matched: dict[str, str]) -> None:
    first = run.steps_done()
    assert first >= 1
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
        # each sync after a step bumps the weight version every engine reports
        answer = requests.get(f"{url}/get_weight_version", timeout=5).json()
        assert int(answer["weight_version"]) >= 1
    marked = set(marked_processes(run.submission_id))
    assert {procs["driver"], procs["engine 1 actor"], procs["engine 1 scheduler"]} <= marked
    # slime's router: the RolloutManager's forked child, under the actor's title, in its
    # environment, and it knows both engines (they registered with POST /workers)
    router = psutil.Process(procs["router"])
    assert router.ppid() == procs["rollout_manager"]
    assert _title(router.pid).startswith("ray::RolloutManager")
    assert router.pid in marked
    assert sorted(_router_workers(run)) == sorted(urls.values())


def _router_url(run: DemoRun) -> str:
    found = _ROUTER_RE.findall(run.logs())
    assert found, "the job did not log its router"
    return f"http://{found[0][0]}:{found[0][1]}"


def _router_workers(run: DemoRun) -> list[str]:
    answer = requests.get(f"{_router_url(run)}/workers", timeout=5).json()
    return [str(w["url"]) for w in answer["workers"]]


def _router_worker_removed(run: DemoRun, _matched: dict[str, str]) -> None:
    """The router is up and knows no engine; the engines are up and idle."""
    _assert_stuck(run)
    assert _router_workers(run) == []
    for url in run.engine_urls().values():
        assert requests.get(f"{url}/health", timeout=5).status_code == 200


def _router_killed(run: DemoRun, _matched: dict[str, str]) -> None:
    """The router's port refuses connections; the engines are up and idle."""
    _assert_stuck(run)
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{_router_url(run)}/workers", timeout=5)
    for url in run.engine_urls().values():
        assert requests.get(f"{url}/health", timeout=5).status_code == 200


def _disk_weight_sync(run: DemoRun, _matched: dict[str, str]) -> None:
    """Steps advance through slime main's disk weight sync: train rank 0 writes each version's
    HF checkpoint and every engine reloads it (its weight version is the disk version)."""
    first = run.steps_done()
    deadline = time.monotonic() + 60
    while run.steps_done() <= first and time.monotonic() < deadline:
        time.sleep(0.5)
    assert run.steps_done() > first, run.logs()[-3000:]
    assert ARMED_TEXT not in run.logs()
    assert re.search(r"Saving model in HuggingFace format to \S+/weight_v\d{6}", run.logs())
    for url in run.engine_urls().values():
        answer = requests.get(f"{url}/get_weight_version", timeout=5).json()
        assert int(answer["weight_version"]) >= 2  # version 1 at start-up, then one per step


def _weight_load_slow_storage(run: DemoRun, _matched: dict[str, str]) -> None:
    """Issue 34 items 1 and 3: engine 1's scheduler waits in a pipe read of the slow storage while
    the bytes its reads return keep rising (the storage layer counts none); engine 0 has loaded
    the new version and waits, paused, for the driver's continue."""
    scheduler = psutil.Process(run.processes()["engine 1 scheduler"])
    before = scheduler.io_counters()
    _assert_stuck(run)  # no train step completes while the reload reads
    after = scheduler.io_counters()
    assert after.read_chars - before.read_chars >= 512 << 10, (before, after)
    assert after.read_bytes == before.read_bytes, (before, after)
    with open(f"/proc/{scheduler.pid}/wchan") as fh:
        assert fh.read().strip() in ("pipe_read", "anon_pipe_read", "fifo_pipe_read")
    urls = run.engine_urls()
    versions = [
        requests.get(f"{urls[i]}/get_weight_version", timeout=5).json()["weight_version"]
        for i in (0, 1)
    ]
    assert int(versions[0]) == int(versions[1]) + 1, versions


def _rollout_session_server_blocked(run: DemoRun, _matched: dict[str, str]) -> None:
    """miles PR#1602: the session server burns its core while the engines still decode."""
    procs = run.processes()
    server = psutil.Process(procs["session server"])
    assert server.ppid() == procs["rollout_manager"]
    decoded = [_decode_tokens(url) for url in run.engine_urls().values()]
    _assert_stuck(run)
    assert any(
        _decode_tokens(url) > n for url, n in zip(run.engine_urls().values(), decoded, strict=True)
    )


def _decode_tokens(url: str) -> float:
    """An engine's decode-token counter, as the doctor reads it (parsers.sglang)."""
    from slime_hangdoctor.parsers.sglang import parse_metrics

    return float(
        parse_metrics(requests.get(f"{url}/metrics", timeout=5).text).decode_tokens_total or 0
    )


# A fault's own checks on the live job, after the doctor's run and the frame signatures.
def _startup_tp_rank_killed(run: DemoRun, _matched: dict[str, str]) -> None:
    """The dead rank's title is missing: engine 1 has its TP0 and no TP1; engine 0 has both."""
    procs = run.processes()
    assert "engine 1 scheduler" in procs and "engine 1 scheduler TP1" not in procs, procs
    assert "engine 0 scheduler TP1" in procs, procs


LIVE_CHECKS: dict[str, Callable[[DemoRun, dict[str, str]], None]] = {
    "startup_tp_rank_killed": _startup_tp_rank_killed,
    "weight_sync_engine_missing": _weight_sync_engine_missing,
    "reward_hang": _reward_hang,
    "colocate_update_hang": _colocate_update_hang,
    "train_rank_stuck": _train_rank_stuck,
    "checkpoint_slow_storage": _checkpoint_slow_storage,
    "checkpoint_stuck_storage": _checkpoint_stuck_storage,
    "train_custom_loss_stuck": _train_rank_stuck,
    "none": _healthy,
    "disk_weight_sync": _disk_weight_sync,
    "router_worker_removed": _router_worker_removed,
    "router_killed": _router_killed,
    "weight_load_slow_storage": _weight_load_slow_storage,
    "rollout_session_server_blocked": _rollout_session_server_blocked,
}


def _finding(verdict: dict[str, Any], rule: str) -> dict[str, Any]:
    found = next((f for f in verdict["findings"] if f["rule"] == rule), None)
    assert found is not None, [f["rule"] for f in verdict["findings"]]
    return found


def _rollout_behind_proxy(verdict: dict[str, Any], run: DemoRun) -> None:
    """slime#1026: the environment source (the RolloutManager's proxy variables) names the cause,
    and the sockets source shows its connections held at the proxy; no engine holds a request."""
    rm = run.roles()["rollout_manager"]
    assert verdict["culprits"][0]["pid"] == rm
    assert "environ" in _finding(verdict, "culprit")["message"]
    cause = _finding(verdict, "requests-at-proxy")
    assert any(
        e.startswith("[environ]") and f"pid {rm}" in e and "connection(s) to the proxy" in e
        for e in cause["evidence"]
    ), cause
    assert not any(f["rule"] == "requests-held-outside-scheduler" for f in verdict["findings"])


def _rollout_slots_leaked(verdict: dict[str, Any], run: DemoRun) -> None:
    """Class 4's own: the RolloutManager is blamed on its task history and its sockets, and the
    culprit finding cites both."""
    assert verdict["culprits"][0]["pid"] == run.roles()["rollout_manager"]
    culprit = _finding(verdict, "culprit")
    assert "ray_tasks" in culprit["message"] and "rollout" in culprit["message"], culprit
    assert any(e.startswith("[ray_tasks]") and "generate for" in e for e in culprit["evidence"])
    assert any(e.startswith("[sockets]") and "no connection" in e for e in culprit["evidence"])
    assert not any(f["rule"] == "requests-at-proxy" for f in verdict["findings"])


def _checkpoint_slow_storage_verdict(verdict: dict[str, Any], _run: DemoRun) -> None:
    """Issue 14 item 8, kernel source: only rank 0's storage bytes show the save moving."""
    assert verdict["extra"]["current_stage"] == "checkpoint", verdict["extra"]
    io = _finding(verdict, "storage-io")
    assert [e.split(" (pid")[0] for e in io["evidence"]] == ["train rank 0"], io
    progress = _finding(verdict, "progress")
    assert any(
        e.startswith("train rank 0:") and "to storage between the samples" in e
        for e in progress["evidence"]
    ), progress


def _checkpoint_stuck_storage_verdict(verdict: dict[str, Any], _run: DemoRun) -> None:
    """Kernel source: rank 0's write in pipe_write with no byte moved is stuck storage, not the
    collective mismatch the stacks alone suggest."""
    stall = _finding(verdict, "checkpoint-stall")["message"]
    assert "stuck in storage, not in a collective" in stall and "pipe_write" in stall, stall
    blocked = _finding(verdict, "stuck-writing")
    assert [e.split(" (pid")[0] for e in blocked["evidence"]] == ["train rank 0"], blocked


def _checkpoint_writer_deadlock(verdict: dict[str, Any], run: DemoRun) -> None:
    """Issue 21 item 5: the writer rank 0 forked keeps its Ray title; it is rank 0's child, never
    a third rank, and rank 0 is the one culprit, with the child named as where it waits."""
    rank0 = run.processes()["train rank 0"]
    assert [(c["rank"], c["pid"]) for c in verdict["culprits"]] == [(0, rank0)], verdict["culprits"]
    assert "its child train rank 0 child (pid " in verdict["culprits"][0]["why"]
    assert "train rank 2" not in json.dumps(verdict)


def _checkpoint_plan_gather_stuck(verdict: dict[str, Any], _run: DemoRun) -> None:
    """slime#1908's shape: every rank waits in the save plan's gather_object, no rank stands out;
    checkpoint-stall says so (no culprit: `_check_culprit`), a warning (exit 1), not critical."""
    stall = _finding(verdict, "checkpoint-stall")
    assert stall["message"].startswith("All 2 rank(s) in the checkpoint wait in a collective"), (
        stall
    )
    assert verdict["exit_code"] == 1, verdict["summary"]


def _weight_sync_health_check_queued(verdict: dict[str, Any], _run: DemoRun) -> None:
    """open-instruct PR#1454's shape: Ray's task list shows the RolloutHealthMonitor's
    health_generate queued on an engine actor behind a running method (the blocked update, or,
    should the check have gone first, the update behind the check)."""
    queues = _finding(verdict, "ray_tasks.queues")
    assert any("health_generate" in e for e in queues["evidence"]), queues


def _train_custom_loss_stuck(verdict: dict[str, Any], _run: DemoRun) -> None:
    """Issue 14 item 8, logs source: rank 0's open `Timer actor_train start` agrees with the
    stage the FSDP backend's frames name (issue 45 item 5: slime's FSDP rows)."""
    timer = _finding(verdict, "log-open-timer")
    assert "`Timer actor_train start`" in timer["message"], timer
    assert "it agrees with the stage found live" in timer["message"], timer


def _engine_paused_by_update(verdict: dict[str, Any], run: DemoRun) -> None:
    """AReaL#1160: only the router's connections to engine 1 (the rollout's requests go through
    slime's router), held across both samples (the sockets source), say where the rollout's
    requests are; the healthy engine is not named."""
    urls = run.engine_urls()
    held = _finding(verdict, "requests-held-outside-scheduler")
    assert any(urls[1] in e and "router" in e for e in held["evidence"]), held
    assert not any(urls[0] in e for e in held["evidence"]), held
    culprit = _finding(verdict, "culprit")
    assert any(e.startswith("[sockets]") for e in culprit["evidence"]), culprit


def _engine_server_killed(verdict: dict[str, Any], run: DemoRun) -> None:
    """Class 2: the killed server listens nowhere; its URL comes from the head of its engine
    actor's log (and the router's /workers), the engine is dead, the culprit is that actor, and the
    evidence says where the URL was read."""
    url = run.engine_urls()[1]
    assert {"url": url, "state": "dead"} in verdict["extra"]["engines"], verdict["extra"]
    assert verdict["culprits"][0]["pid"] == run.roles()["engine 1 actor"], verdict["culprits"]
    evidence = [e for f in verdict["findings"] for e in f["evidence"]]
    assert any(
        f"{url} is known from the head of the err log of SGLangEngine" in e for e in evidence
    ), evidence


def _reward_service_stuck(verdict: dict[str, Any], run: DemoRun) -> None:
    """Issue 21 item 3: the rollout waits on a remote reward model outside the job. Only the
    RolloutManager's connections (sockets) show where; the peer is named from the job's command
    line (`--rm-url`), and the stage is what the rollout waits on it for (the reward)."""
    rm = run.roles()["rollout_manager"]
    cause = _finding(verdict, "requests-at-external-service")
    assert "reward model http://127.0.0.1:" in cause["message"], cause
    assert "--rm-url" in cause["message"], cause
    assert any(e.startswith("[sockets]") and f"pid {rm}" in e for e in cause["evidence"]), cause
    assert verdict["culprits"][0]["pid"] == rm
    assert not any(f["rule"] == "requests-held-outside-scheduler" for f in verdict["findings"])


def _weight_load_slow_storage_verdict(verdict: dict[str, Any], run: DemoRun) -> None:
    """Item 1: only the kernel's read counters of engine 1's scheduler show the load moving, and
    the report says how fast; item 3: no engine is called left paused mid-update."""
    url = run.engine_urls()[1]
    io = _finding(verdict, "storage-io")
    assert any(e.startswith(f"scheduler {url} (pid ") and "slow: " in e for e in io["evidence"])
    assert "MiB/s" in verdict["summary"], verdict["summary"]
    assert not any(f["rule"] == "ray_tasks.engine_paused" for f in verdict["findings"])


def _rollout_session_server_blocked_verdict(verdict: dict[str, Any], run: DemoRun) -> None:
    """Item 2: the hop is named by its title, the engines' tokens are reported, not counted."""
    pid = verdict["culprits"][0]["pid"]
    assert pid != run.roles()["rollout_manager"]
    held = _finding(verdict, "request-path-held")
    # the place is the call of its handler that both samples caught: the render (the recording),
    # or a call above it where one sample caught the handler elsewhere (writing the rendered body
    # on a loaded box): a frame of the session server's own code either way
    assert any(
        f"`miles-session-server` (pid {pid})" in e
        and re.search(r"CPU-bound in \S+ \(slime/rollout/session/\w+\.py:\d+\)", e)
        for e in held["evidence"]
    ), held
    counted = _finding(verdict, "progress-not-counted")
    assert any("not the job's progress" in e for e in counted["evidence"]), counted


def _train_rank_extra_step(verdict: dict[str, Any], run: DemoRun) -> None:
    """Issue 34 item 4: rank 0 finished train and idles; rank 1 waits in the extra step's
    all_reduce. Rank 1 is named for the path its returned peer did not take; rank 0 never."""
    (culprit,) = verdict["culprits"]
    assert culprit["pid"] == run.roles()["train rank 1"], culprit
    assert "its peers will never enter" in culprit["why"], culprit["why"]
    assert "train rank 0 returned: its Ray task train" in culprit["why"], culprit["why"]


def _reward_verifier_pool_stuck(verdict: dict[str, Any], run: DemoRun) -> None:
    """Issue 34 item 6: the RolloutManager awaits a grade its process pool's worker (a child it
    forked, with its Ray title) never returns; the verdict names both."""
    (culprit,) = verdict["culprits"]
    assert culprit["pid"] == run.roles()["rollout_manager"], culprit
    # the job is stopped by now: the worker's pid is the one the frame check saw live
    worker = re.search(r"rollout manager child \(pid (\d+)\), a process it forked", culprit["why"])
    assert worker is not None and int(worker.group(1)) != culprit["pid"], culprit["why"]
    assert "runs the reward function" in culprit["why"], culprit["why"]


def _update_waits_behind_rollout_gate(verdict: dict[str, Any], run: DemoRun) -> None:
    """Issue 34 item 7 (NeMo-RL#2694's mutual wait, no HTTP in it): rank 0's call waits in the
    RolloutManager's queue behind generate, which waits on its own gate; Ray's task list, held over
    both samples, passes the blame from rank 0 to the RolloutManager."""
    (culprit,) = verdict["culprits"]
    assert culprit["pid"] == run.roles()["rollout_manager"], culprit
    passed = _finding(verdict, "blame-passed")
    assert any(
        "recover_updatable_engines, queued on rollout manager behind the generate" in e
        for e in passed["evidence"]
    ), passed


# A fault's checks of the verdict beyond status, stage and culprit: the finding naming its source.
def _startup_tp_rank_killed_verdict(verdict: dict[str, Any], run: DemoRun) -> None:
    """The culprit is the dead rank itself (a zombie child of the engine's HTTP process), in the
    engine whose URL only slime's launch line names (its server never listened)."""
    culprit = verdict["culprits"][0]
    assert culprit["dead"] and culprit["process"] == "scheduler", culprit
    assert run.engine_urls()[1] in verdict["summary"], verdict["summary"]


def _rollout_tp_rank_killed(verdict: dict[str, Any], run: DemoRun) -> None:
    """The whole engine went with its rank (SGLang's SubprocessWatchdog): engine 1 is dead."""
    url = run.engine_urls()[1]
    assert {"url": url, "state": "dead"} in verdict["extra"]["engines"], verdict["extra"]


VERDICT_CHECKS: dict[str, Callable[[dict[str, Any], DemoRun], None]] = {
    "startup_tp_rank_killed": _startup_tp_rank_killed_verdict,
    "rollout_tp_rank_killed": _rollout_tp_rank_killed,
    "train_rank_extra_step": _train_rank_extra_step,
    "reward_verifier_pool_stuck": _reward_verifier_pool_stuck,
    "update_waits_behind_rollout_gate": _update_waits_behind_rollout_gate,
    "rollout_behind_proxy": _rollout_behind_proxy,
    "engine_paused_by_update": _engine_paused_by_update,
    "rollout_slots_leaked": _rollout_slots_leaked,
    "checkpoint_slow_storage": _checkpoint_slow_storage_verdict,
    "checkpoint_stuck_storage": _checkpoint_stuck_storage_verdict,
    "checkpoint_writer_deadlock": _checkpoint_writer_deadlock,
    "checkpoint_plan_gather_stuck": _checkpoint_plan_gather_stuck,
    "weight_sync_health_check_queued": _weight_sync_health_check_queued,
    "train_custom_loss_stuck": _train_custom_loss_stuck,
    "engine_server_killed": _engine_server_killed,
    "reward_service_stuck": _reward_service_stuck,
    "weight_load_slow_storage": _weight_load_slow_storage_verdict,
    "rollout_session_server_blocked": _rollout_session_server_blocked_verdict,
}
# Faults where the router does not list every engine when the doctor comes: an engine that never
# came up never registered; no RolloutManager, no router; the router faults themselves; a router
# that cannot reach the engines.
ROUTER_WITHOUT_EVERY_ENGINE = frozenset(
    {
        "startup_engine_never_healthy",
        "startup_tp_rank_killed",
        "startup_engine_warmup_stuck",
        "startup_engine_warmup_stuck_colocate",
        "placement_infeasible",
        "router_worker_removed",
        "router_killed",
        # the router inherits the RolloutManager's environment across the fork, proxy included:
        # its registration probes of the engines wait at the proxy, no engine is ever added
        "rollout_behind_proxy",
    }
)
# Healthy steps before a fault arms (default 0): the colocated update hangs after one full step.
FAULT_AFTER_STEPS: dict[str, int] = {"colocate_update_hang": 1, "reward_service_stuck": 1}


@dataclass
class FaultRun:
    """What one fault's live run gave: the doctor's answer and the checks made on the live job."""

    run: DemoRun
    workdir: Path
    rc: int = -1
    verdict: dict[str, Any] | None = None
    wall: float = 0.0
    error: BaseException | None = None  # raised by the live part (start, attach, live checks)


def _attach_live(fault: str, run: DemoRun, workdir: Path) -> FaultRun:
    """On `fault`'s live job: attach the doctor (by the head's dashboard URL: it sees only the job
    of that cluster), then check that the job still holds its hang where slime.md says."""
    result = FaultRun(run, workdir)
    try:
        result.rc, result.verdict, _err, result.wall = attach(
            run.head.dashboard_url, "--bundle", str(workdir / "bundle")
        )
        if have_pyspy():
            matched = check_all_signatures(run, FAULTS[fault])
            if fault in LIVE_CHECKS:
                LIVE_CHECKS[fault](run, matched)
    except BaseException as exc:  # noqa: BLE001 - re-raised by the fault's own test
        result.error = exc
    return result


def _diagnose_live(fault: str, slot: Slot) -> FaultRun:
    """Start `fault`'s demo job on the slot's head, attach the doctor, check the live hang, stop
    the job (the live pool runs this, two faults at a time, each on its slot's own head)."""
    workdir = slot.workdir(fault)
    # a fault that needs a head option of its own (a small object store) starts its own head,
    # which the run stops with the job; the others share the slot's
    own_head = FAULTS[fault].object_store_mib is not None
    run = start_demo(
        fault,
        workdir=workdir / "demo",
        head=None if own_head else slot.head,
        fault_after_steps=FAULT_AFTER_STEPS.get(fault, 0),
    )
    try:
        run.wait_until_ready(timeout=200)
    except BaseException as exc:  # noqa: BLE001 - re-raised by the fault's own test
        run.stop()
        return FaultRun(run, workdir, error=exc)
    try:
        return _attach_live(fault, run, workdir)
    finally:
        run.stop()


# Faults whose live job is a shared one (tests/live_jobs.py): the doctor's run is a part of it,
# after (stall-job: the watchdog's ticks) or before (none-job) the other modules' parts.
SHARED_JOB = {"none": (NONE_JOB, -1), "rollout_engine_stuck": (STALL_JOB, 1)}


def _attach_part(fault: str, run: DemoRun, _slot: Slot, workdir: Path) -> FaultRun:
    return _attach_live(fault, run, workdir)


def _scenario(fault: str) -> str:
    return f"{SHARED_JOB[fault][0]}/attach" if fault in SHARED_JOB else f"attach:{fault}"


for _fault in FAULTS:
    if _fault in SHARED_JOB:
        _job, _order = SHARED_JOB[_fault]
        job_part(_job, "attach", order=_order)(functools.partial(_attach_part, _fault))
    else:
        add_scenario(f"attach:{_fault}", functools.partial(_diagnose_live, _fault))


def _marks(fault: str) -> list[pytest.MarkDecorator]:
    marks = [pytest.mark.live(_scenario(fault))]
    gap = FAULTS[fault].known_gap
    if gap is not None:  # the doctor's verdict today, until a rule reaches the expected one
        marks.append(pytest.mark.xfail(reason=gap, strict=True))
    return marks


@pytest.mark.parametrize("fault", [pytest.param(f, marks=_marks(f)) for f in sorted(FAULTS)])
def test_attach_names_the_stage_and_the_culprit(live_pool: LivePool, fault: str) -> None:
    """Each demo fault: status, blocked stage and culprit process as the fault registry expects;
    the hang holds where its frame signatures say; the stopped job leaves no process behind."""
    # GIVEN a live demo job that has reached its fault, WHEN the doctor attached (_attach_live);
    # the pool hands the result over once the job is stopped
    result: FaultRun = live_pool.result(_scenario(fault))
    if result.error is not None:
        raise result.error
    run, verdict = result.run, result.verdict
    assert verdict is not None
    assert marked_processes(run.submission_id) == []
    # THEN
    expected = FAULTS[fault].expected
    assert verdict["schema"] == "slime-hangdoctor.verdict/1"
    assert (verdict["status"], verdict["stage"]) == (expected.status, expected.stage), verdict[
        "summary"
    ]
    _check_culprit(verdict, run, fault)
    if fault in VERDICT_CHECKS:
        VERDICT_CHECKS[fault](verdict, run)
    rc = result.rc
    assert rc == verdict["exit_code"] and rc in ((1, 2) if expected.status == "hung" else (0,))
    assert result.wall < TIMEOUT_S + 5
    assert (result.workdir / "bundle" / "manifest.json").is_file()
    assert (result.workdir / "bundle.tar.gz").is_file()
    with open_bundle(result.workdir / "bundle") as bundle:
        ok = {r.source for r in bundle.manifest.probes if r.outcome.value == "ok"}
        http = load_snapshot(bundle).joined(HTTP_ANSWERS)
    assert {
        SOCKETS,
        KERNEL,
    } <= ok  # the node-local procfs sources read every demo job
    if fault not in ROUTER_WITHOUT_EVERY_ENGINE:
        # the doctor found slime's router and read its /workers: the demo's engines
        routed = {
            url
            for obs in http
            if obs.kind == "router" and isinstance(obs.parsed, RouterWorkers)
            for url in obs.parsed.urls
        }
        known = set(run.engine_urls().values())  # empty where the job's log lost its head
        assert len(routed) == 2 and (not known or routed == known), (routed, known)


@scenario("attach:idle")
def _attach_idle(slot: Slot) -> dict[str, tuple[int, dict[str, Any]]]:
    """The doctor on the slot's head, between jobs (whatever ran there has been stopped), by each
    address form: the dashboard URL, host:6379 (GCS) and RAY_ADDRESS."""
    import os

    head = slot.head
    out: dict[str, tuple[int, dict[str, Any]]] = {}
    rc, verdict, _err, _wall = attach(head.dashboard_url)
    out["dashboard"] = (rc, verdict)
    rc, verdict, _err, _wall = attach(head.gcs_address)
    out["gcs"] = (rc, verdict)
    env = {**os.environ, "RAY_ADDRESS": head.gcs_address}
    proc, _wall = run_cli("attach", "--json", "--window", "1", env=env)
    out["auto_env"] = (proc.returncode, json.loads(proc.stdout))
    return out


@pytest.mark.live("attach:idle")
def test_attach_to_a_cluster_without_a_slime_job_is_idle(live_pool: LivePool) -> None:
    """A cluster whose job finished (or never ran one) is idle, exit 0."""
    rc, verdict = live_pool.result("attach:idle")["dashboard"]
    assert verdict["status"] == "idle" and rc == 0, verdict


@pytest.mark.live("attach:idle")
@pytest.mark.parametrize("form", ["gcs", "auto_env"])
def test_address_forms_reach_the_same_cluster(live_pool: LivePool, form: str) -> None:
    """host:6379 (GCS) and RAY_ADDRESS both find the dashboard."""
    rc, verdict = live_pool.result("attach:idle")[form]
    assert verdict["status"] == "idle" and rc == 0, verdict


def test_dead_address_ends_within_the_deadline_with_exit_3() -> None:
    """A wrong address: exit 3, within the deadline, naming the address forms it tried."""
    proc, wall = run_cli("attach", "127.0.0.1:1", "--timeout", "5", "--json")
    assert proc.returncode == 3 and "Traceback" not in proc.stderr
    verdict = json.loads(proc.stdout)
    assert verdict["status"] == "unknown"
    assert "127.0.0.1:1" in verdict["summary"]
    assert wall < 5 + 3
