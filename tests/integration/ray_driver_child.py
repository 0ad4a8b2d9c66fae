"""The doctor's side of a node probe, in a process of its own, as `attach` runs it (a CLI process).

test_ray_cluster_collect.py runs each scenario here in a fresh interpreter. The doctor's Ray
driver runs in a process of its own (collect/ray_driver.py, started by remote.RayTasks); the
scenarios that drive Ray in this process themselves (`ray_driver.Driver`: the pickle's control,
the probe's loaders) would end it with exit code 1 on some cluster failures (Ray's core worker
cannot reach its raylet or the GCS), which in the pytest process would end the whole suite
without a word. Here it ends one test, with the exit code and this process's output in the failure.

    python tests/integration/ray_driver_child.py SCENARIO JSON
    # exit 0 when every check of the scenario held; an AssertionError's traceback otherwise
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from slime_hangdoctor.bundle import BundleWriter
from slime_hangdoctor.collect.dashboard import DashboardClient
from slime_hangdoctor.collect.node_probe import NodeSpec
from slime_hangdoctor.collect.options import CollectOptions, Deadline
from slime_hangdoctor.collect.probe_boot import BootProbe
from slime_hangdoctor.collect.ray_driver import Driver
from slime_hangdoctor.collect.remote import (
    RayTasks,
    RemoteNode,
    collect_remote,
    gather_remote,
    sample_budget,
    short_window_spots,
)
from slime_hangdoctor.outcome import Outcome
from slime_hangdoctor.parsers.ray_state import parse_actors


def _connected(gcs_address: str) -> RayTasks:
    tasks = RayTasks(gcs_address, timeout_s=180.0)
    why = tasks.ready(120.0)
    assert why is None, why
    return tasks


def _driver_here(gcs_address: str) -> Driver:
    """A Ray driver in this process (what the doctor's driver process runs)."""
    driver = Driver(gcs_address)
    driver.connect()
    return driver


def _probe_actors(dashboard_url: str) -> list[str]:
    res = DashboardClient(dashboard_url, token="", timeout=5.0).get(
        "/api/v0/actors?detail=1&limit=1000"
    )
    assert res.status == 200, (res.status, res.error)
    actors = parse_actors(res.body)
    return [a.actor_id for a in actors if a.class_name == BootProbe.__name__ and a.state == "ALIVE"]


def _package_loaders(_actor: object) -> set[str]:
    """In the probe's process: the loaders its `slime_hangdoctor` modules came from."""
    return {
        type(getattr(module.__spec__, "loader", None)).__name__
        for name, module in list(sys.modules.items())
        if name.split(".")[0] == "slime_hangdoctor" and module is not None
    }


def one_probe_answers_both_samples(spec: dict[str, Any]) -> None:
    """A node's probe is created once and answers both samples (and its GPU readings) as plain
    bytes that join the bundle as records of that node."""
    driver = _connected(spec["gcs"])
    try:
        node = RemoteNode(spec["node_id"], spec["node_ip"])
        writer = BundleWriter(Path(spec["bundle"]), command="test")
        opts = CollectOptions(stacks=False, api_key="hd-key-never-sent", ray_token="hd-token-never")
        roots = frozenset(int(pid) for pid in spec["roots"])
        gpus: list[Any] = []
        for sample in (0, 1):
            deadline = Deadline(90.0)
            started = collect_remote(
                driver, [(node, NodeSpec(node.node_ip, sample, roots))], opts, deadline
            )
            if sample == 0:
                gpus = collect_remote(
                    driver,
                    [(node, NodeSpec(node.node_ip, 0))],
                    opts,
                    deadline,
                    gpus=True,
                    budget_s=5.0,
                )
            assert gather_remote(driver, writer, started, sample, deadline, 60.0) == []
        assert gather_remote(driver, writer, gpus, None, Deadline(30.0), 20.0) == []
        scans = [r for r in writer.records if r.source == "processes" and r.node_ip == node.node_ip]
        assert [r.sample for r in scans] == [0, 1], [(r.sample, r.outcome) for r in scans]
        assert all(r.outcome is Outcome.OK for r in scans), [(r.outcome, r.reason) for r in scans]
        assert any(r.source == "nvml" for r in writer.records), [r.source for r in writer.records]
        assert len(_probe_actors(spec["dashboard"])) == 1, "one probe per node, created once"
    finally:
        driver.close()
    # the probe runs the doctor's own sources, sent with it (probe_boot), not a copy the node
    # has installed (this machine has one): asked of a probe made as the driver's process makes it
    import ray

    here = _driver_here(spec["gcs"])
    try:
        probe = here.probe(node.node_id, node.node_ip)
        loaders = ray.get(probe.__ray_call__.remote(_package_loaders), timeout=60)
        assert loaders == {"SourceFinder"}, loaders
    finally:
        here.close()


def a_pickle_runs_no_code(spec: dict[str, Any]) -> None:
    """Issue 32 point 8: a compromised node returns a pickle whose loading runs code (and a task
    whose exception does the same): the doctor reads neither (it names why), and the code never
    runs in its process; Ray's own `ray.get` of the same answer runs it (the control)."""
    import ray

    marker = Path(spec["marker"])
    code = f"open({str(marker)!r}, 'w').write('pwned')"

    class Payload:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (exec, (code,))

    class Hostile(Exception):
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (exec, (code,))

    def answer() -> Payload:
        return Payload()

    def fail() -> None:
        raise Hostile()

    driver = _driver_here(spec["gcs"])
    try:
        hostile = ray.remote(num_cpus=0, max_retries=0)(answer)
        failing = ray.remote(num_cpus=0, max_retries=0)(fail)
        data, why = driver.fetch(hostile.remote(), 60.0)
        assert data is None and why is not None and "not read" in why, why
        assert not marker.exists(), "the node's pickle ran code in the doctor"
        data, why = driver.fetch(failing.remote(), 60.0)
        assert data is None and why is not None and "TASK_EXECUTION_EXCEPTION" in why, why
        assert not marker.exists(), "the node's exception ran code in the doctor"
        ray.get(hostile.remote(), timeout=60)  # the control: the payload is live
        assert marker.read_text() == "pwned"
    finally:
        driver.close()


def a_driver_killed_mid_call_costs_the_call(spec: dict[str, Any]) -> None:
    """Issue 43 item 1: the driver's process is killed while a node's sample is under way (as
    Ray's core worker ends it on a failed check or a lost raylet): the node is a blind spot
    naming how the driver ended, at once, and the next run's driver (a new process, as `watch`
    starts one per run) answers the same node."""
    import signal
    import time

    node = RemoteNode(spec["node_id"], spec["node_ip"])
    roots = frozenset(int(pid) for pid in spec["roots"])
    opts = CollectOptions(stacks=True)
    killed = _connected(spec["gcs"])
    try:
        writer = BundleWriter(Path(spec["bundle"]) / "killed", command="test")
        deadline = Deadline(60.0)
        started = collect_remote(killed, [(node, NodeSpec(node.node_ip, 0, roots))], opts, deadline)
        time.sleep(0.2)  # the call is on its way
        assert killed.pid is not None
        os.kill(killed.pid, signal.SIGKILL)
        t0 = time.monotonic()
        assert gather_remote(killed, writer, started, 0, deadline, 30.0) == [node]
        assert time.monotonic() - t0 < 2.0, "the driver's end was not seen at once"
        (spot,) = [r for r in writer.records if r.outcome is not Outcome.OK]
        assert f"Ray driver (pid {killed.pid}) ended, killed by SIGKILL" in str(spot.reason), spot
    finally:
        killed.close()
    fresh = _connected(spec["gcs"])
    try:
        assert fresh.pid != killed.pid
        writer = BundleWriter(Path(spec["bundle"]) / "fresh", command="test")
        deadline = Deadline(60.0)
        started = collect_remote(fresh, [(node, NodeSpec(node.node_ip, 0, roots))], opts, deadline)
        assert gather_remote(fresh, writer, started, 0, deadline, 50.0) == []
        assert any(r.source == "pyspy" and r.outcome is Outcome.OK for r in writer.records)
    finally:
        fresh.close()


def a_late_probe_keeps_its_window(spec: dict[str, Any]) -> None:
    """Issue 46: a node's probe asked for both samples at once (as a probe whose worker starts
    late is) begins its second sample a whole window after its first; the doctor's second-sample
    wait (a sample's time and what is left of the window after the first answer) covers it. Then
    the probe's worker dies (SIGKILL, as a node's probe may): its GPU readings' call fails, a
    blind spot of that node's GPUs, not of the node."""
    window = 2.0
    driver = _connected(spec["gcs"])
    try:
        node = RemoteNode(spec["node_id"], spec["node_ip"])
        writer = BundleWriter(Path(spec["bundle"]), command="test", window_s=window)
        opts = CollectOptions(stacks=False, window_s=window)
        roots = frozenset(int(pid) for pid in spec["roots"])
        deadline = Deadline(90.0)
        started = [
            collect_remote(driver, [(node, NodeSpec(node.node_ip, s, roots))], opts, deadline)
            for s in (0, 1)
        ]
        # the first as long as the probe's boot takes; the second as the doctor's second sample
        # waits: a sample's time and what is left of the window after the first answer came
        assert gather_remote(driver, writer, started[0], 0, deadline, 60.0) == []
        wait = sample_budget(opts) + 1.0
        assert gather_remote(driver, writer, started[1], 1, deadline, wait, window_s=window) == []
        scans = [r for r in writer.records if r.source == "processes" and r.node_ip == node.node_ip]
        assert [(r.sample, r.outcome) for r in scans] == [(0, Outcome.OK), (1, Outcome.OK)], scans
        gap = scans[1].started_at - scans[0].started_at
        assert gap >= window, gap
        assert short_window_spots(writer, [node], window) == 0
        (probe,) = _probe_pids(spec["dashboard"])
        os.kill(probe, signal.SIGKILL)
        gpus = collect_remote(
            driver, [(node, NodeSpec(node.node_ip, 0))], opts, deadline, gpus=True, budget_s=10.0
        )
        assert gather_remote(driver, writer, gpus, None, deadline, 30.0) == []
        (gpu,) = [r for r in writer.records if r.source == "nvml" and r.sample is None]
        assert gpu.outcome is Outcome.UNAVAILABLE and gpu.node_ip == node.node_ip, gpu
        assert "GPU readings not taken: " in (gpu.reason or ""), gpu.reason
        assert not [r for r in writer.records if "not inspected" in (r.reason or "")]
    finally:
        driver.close()


def _probe_pids(dashboard_url: str) -> list[int]:
    res = DashboardClient(dashboard_url, token="", timeout=5.0).get(
        "/api/v0/actors?detail=1&limit=1000"
    )
    assert res.status == 200, (res.status, res.error)
    return [
        a.pid
        for a in parse_actors(res.body)
        if a.class_name == BootProbe.__name__ and a.state == "ALIVE" and a.pid
    ]


SCENARIOS = {
    f.__name__: f
    for f in (
        one_probe_answers_both_samples,
        a_late_probe_keeps_its_window,
        a_pickle_runs_no_code,
        a_driver_killed_mid_call_costs_the_call,
    )
}

if __name__ == "__main__":
    SCENARIOS[sys.argv[1]](json.loads(sys.argv[2]))
    print(f"{sys.argv[1]}: ok", flush=True)
