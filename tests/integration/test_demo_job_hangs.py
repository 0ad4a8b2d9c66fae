"""Injected hangs of the demo job hold where slime.md §8 says they would: py-spy of the key
processes (real Ray actors, real gloo groups, the real SGLang stand-in) shows the signature
frames of slime_hangdoctor/demo/faults.py. One Ray head is shared by the runs of this file."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from slime_hangdoctor.demo import cluster
from slime_hangdoctor.demo.faults import get_fault
from slime_hangdoctor.demo.launch import DemoRun, start_demo
from tests.integration.demo_job_harness import (
    check_all_signatures,
    have_pyspy,
    marked_processes,
    pyspy_threads,
    thread_has_frames,
)

pytestmark = [
    pytest.mark.ray,
    pytest.mark.slow,
    pytest.mark.timeout(240),
    pytest.mark.skipif(not have_pyspy(), reason="py-spy is not installed"),
]


def _run(head: cluster.RayHead, tmp_path: Path, fault: str, after: int) -> DemoRun:
    run = start_demo(fault, workdir=tmp_path, fault_after_steps=after, head=head)
    run.wait_until_ready(timeout=120)
    return run


def _assert_stuck(run: DemoRun) -> None:
    steps = run.steps_done()
    time.sleep(2.0)
    assert run.steps_done() == steps
    assert run.status() == "RUNNING"


def test_weight_sync_engine_missing_blocks_rank0_in_broadcast(
    head: cluster.RayHead, tmp_path: Path
) -> None:
    spec = get_fault("weight_sync_engine_missing")
    run = _run(head, tmp_path, spec.name, after=0)
    try:
        _assert_stuck(run)
        matched = check_all_signatures(run, spec)
        rank0 = next(v for k, v in matched.items() if k.startswith("train rank 0"))
        assert "distributed_c10d.py" in rank0
        assert "update_weight_from_distributed.py" in rank0
        # the healthy engine is not stuck in the sync: its scheduler waits for requests
        threads = pyspy_threads(run.processes()["engine 0 scheduler"])
        assert any(thread_has_frames(t, ("recv_requests", "event_loop_normal")) for t in threads)
    finally:
        sid = run.submission_id
        run.stop()
    assert marked_processes(sid) == []


def test_reward_hang_spins_on_the_rollout_loop_thread(
    head: cluster.RayHead, tmp_path: Path
) -> None:
    spec = get_fault("reward_hang")
    run = _run(head, tmp_path, spec.name, after=0)
    try:
        _assert_stuck(run)
        check_all_signatures(run, spec)
        # CPU-hot: the loop thread is seen running (not idle) in at least one of a few dumps
        rm = run.processes()["rollout_manager"]
        seen_active = False
        for _ in range(5):
            for t in pyspy_threads(rm):
                if "_start_loop" in str(t.get("thread_name")) and t.get("active"):
                    seen_active = True
            if seen_active:
                break
            time.sleep(0.2)
        assert seen_active
    finally:
        sid = run.submission_id
        run.stop()
    assert marked_processes(sid) == []
