"""Issue 46: every node's two samples a whole window apart, and a failed GPU-readings call a GPU
blind spot of that node only (collect/remote.py `NodeProbe`, `short_window_spots`,
`gather_remote`).

The probe is the one Ray runs on each node (a plain class: here it runs in this process, as the
actor's threads run it), sampling a real process of this machine; its answers travel as they do
from a node (msgpack bytes, read within bounds, filed under the node asked). A node whose probe
started late is asked for both samples at once: the second must still begin a window after the
first, unless the run's deadline leaves no time for it (then the doctor says so)."""

from __future__ import annotations

import concurrent.futures as cf
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from slime_hangdoctor.bundle import Bundle, BundleWriter
from slime_hangdoctor.collect.node_probe import NodeSpec
from slime_hangdoctor.collect.options import CollectOptions, Deadline
from slime_hangdoctor.collect.remote import (
    GPU_SOURCES,
    SAMPLE_SOURCES,
    Asked,
    NodeProbe,
    RayTasks,
    RemoteNode,
    add_exported,
    call_budget,
    collect_remote,
    gather_remote,
    read_answer,
    sample_budget,
    short_window_spots,
)
from slime_hangdoctor.load import load_snapshot
from slime_hangdoctor.outcome import Outcome
from slime_hangdoctor.parsers.nvml import NVML
from slime_hangdoctor.parsers.processes import PROCESSES

NODE = RemoteNode("f" * 56, "192.0.2.31")
WINDOW_S = 1.5
OPTS = CollectOptions(window_s=WINDOW_S, stacks=False, probe_timeout_s=1.0)


@pytest.fixture
def worker() -> Iterator[int]:
    """A real process for the node's scan to find (a Ray worker's pid, as the doctor sends it)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def _both_at_once(pid: int, budget_s: float, tmp_path: Path) -> BundleWriter:
    """A probe asked for both samples at once (its worker started late), each call given
    `budget_s`; their answers filed in a bundle as the doctor files them."""
    probe = NodeProbe()
    writer = BundleWriter(tmp_path / "bundle", command="test", window_s=WINDOW_S)
    with cf.ThreadPoolExecutor(max_workers=2) as pool:
        answers = {
            index: pool.submit(
                probe.sample, NodeSpec(NODE.node_ip, index, frozenset({pid})), OPTS, budget_s
            )
            for index in (1, 0)  # (the actor's threads may pick the second up first)
        }
    for index, answer in answers.items():
        exported, why = read_answer(answer.result())
        assert exported is not None, why
        add_exported(writer, exported, Asked(NODE, index, SAMPLE_SOURCES))
    return writer


def _scan_starts(writer: BundleWriter) -> list[float]:
    scans = [r for r in writer.records if r.source == PROCESSES and r.outcome is Outcome.OK]
    return [min(r.started_at for r in scans if r.sample == index) for index in (0, 1)]


def test_a_late_nodes_second_sample_begins_a_window_after_its_first(
    worker: int, tmp_path: Path
) -> None:
    writer = _both_at_once(worker, call_budget(OPTS, 1), tmp_path)
    first, second = _scan_starts(writer)
    assert second - first >= WINDOW_S, (first, second)
    assert short_window_spots(writer, [NODE], WINDOW_S) == 0


def test_a_second_sample_the_deadline_cuts_short_is_a_blind_spot_of_that_node(
    worker: int, tmp_path: Path
) -> None:
    """The budget of a sample and no more (the run's deadline near): the probe cannot wait, and
    the node's shorter comparison is a named blind spot (the control of the test above)."""
    writer = _both_at_once(worker, sample_budget(OPTS), tmp_path)
    first, second = _scan_starts(writer)
    assert second - first < WINDOW_S * 0.95, (first, second)
    assert short_window_spots(writer, [NODE], WINDOW_S) == 1
    with Bundle(writer.root, writer.manifest()) as view:
        spots = load_snapshot(view).blind_spots
    (spot,) = [s for s in spots if "window" in s]
    assert NODE.node_ip in spot and f"not the {WINDOW_S:.1f} s window" in spot, spot
    assert "slow and hung are told apart over" in spot


def test_a_failed_gpu_call_is_a_gpu_blind_spot_not_the_node(tmp_path: Path) -> None:
    """The doctor's Ray driver could not be reached (no GCS address): the node's sample call
    costs the node ("not inspected"), its GPU-readings call costs its GPUs only."""
    tasks = RayTasks(None, timeout_s=5.0)
    writer = BundleWriter(tmp_path / "bundle", command="test", window_s=WINDOW_S)
    deadline = Deadline(10.0)
    gpus = collect_remote(tasks, [(NODE, NodeSpec(NODE.node_ip, 0))], OPTS, deadline, gpus=True)
    assert [c.asked.sources for c in gpus] == [GPU_SOURCES]
    assert gather_remote(tasks, writer, gpus, None, deadline, 2.0) == []
    (rec,) = writer.records
    assert (rec.source, rec.node_ip, rec.outcome) == (NVML, NODE.node_ip, Outcome.UNAVAILABLE)
    assert rec.reason is not None and "GPU readings not taken" in rec.reason
    assert "not inspected" not in rec.reason
    sample = collect_remote(tasks, [(NODE, NodeSpec(NODE.node_ip, 0))], OPTS, deadline)
    assert gather_remote(tasks, writer, sample, 0, deadline, 2.0) == [NODE]
    node_spot = writer.records[-1]
    assert node_spot.source == PROCESSES and node_spot.reason is not None
    assert "not inspected" in node_spot.reason
    with Bundle(writer.root, writer.manifest()) as view:
        spots = load_snapshot(view).blind_spots
    assert any(s.startswith("nvml gpus: unavailable: node 192.0.2.31") for s in spots), spots
