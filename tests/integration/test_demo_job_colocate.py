"""Demo hangs that start after healthy steps: the colocated weight update that never returns,
and a train rank that never reaches the step's all_reduce. One Ray head for the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from slime_hangdoctor.demo import cluster
from slime_hangdoctor.demo.faults import get_fault
from slime_hangdoctor.demo.launch import start_demo
from tests.integration.demo_job_harness import check_all_signatures, have_pyspy, marked_processes

pytestmark = [
    pytest.mark.ray,
    pytest.mark.slow,
    pytest.mark.timeout(240),
    pytest.mark.skipif(not have_pyspy(), reason="py-spy is not installed"),
]


def test_colocate_update_hang_after_a_healthy_step(head: cluster.RayHead, tmp_path: Path) -> None:
    spec = get_fault("colocate_update_hang")
    run = start_demo(spec.name, workdir=tmp_path, fault_after_steps=1, head=head)
    try:
        run.wait_until_ready(timeout=120)
        assert run.steps_done() >= 1  # it trained (and synced) before it stalled
        assert "release_memory_occupation" in run.logs()  # colocate: engines offload
        check_all_signatures(run, spec)
    finally:
        sid = run.submission_id
        run.stop()
    assert marked_processes(sid) == []


def test_train_rank_stuck_leaves_rank0_in_all_reduce(head: cluster.RayHead, tmp_path: Path) -> None:
    spec = get_fault("train_rank_stuck")
    run = start_demo(spec.name, workdir=tmp_path, fault_after_steps=0, head=head)
    try:
        run.wait_until_ready(timeout=120)
        assert run.steps_done() == 0
        check_all_signatures(run, spec)
    finally:
        sid = run.submission_id
        run.stop()
    assert marked_processes(sid) == []
