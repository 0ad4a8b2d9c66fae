"""Multi-node: a real two-node Ray cluster on one machine, the demo job spread across nodes by resources.

The head (192.0.2.x or whatever Ray picks) runs the driver and the train ranks; a second node joined with
`ray start --address` at 127.0.0.2 (a loopback alias, so the nodes differ by IP as on a real cluster)
holds the engines. The doctor samples its own node in-process and the other through a Ray task pinned
to it; the verdict must name the culprit on the right node, and a node killed mid-run must come back as a
blind spot within the deadline. All of it is one live scenario (tests/live_pool.py) with a cluster
of its own, beside the other live scenarios.
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from slime_hangdoctor.bundle import open_bundle
from slime_hangdoctor_demo import cluster
from slime_hangdoctor_demo.faults import FAULTS
from slime_hangdoctor_demo.launch import DemoRun, start_demo
from tests.integration.cli import CLI, run_cli
from tests.live_pool import LivePool, Slot, scenario

pytestmark = [pytest.mark.ray, pytest.mark.slow]

NODE2_IP = "127.0.0.2"
SPREAD = [
    "--actor-node-resource",
    "node:__internal_head__",
    "--rollout-node-resource",
    "rollout_node",
]


def _attach(address: str, out: Path, timeout: float = 30.0) -> tuple[int, dict[str, Any], float]:
    proc, wall = run_cli(
        "attach",
        address,
        "--json",
        "--window",
        "3",
        "--timeout",
        str(timeout),
        "--bundle",
        str(out),
        timeout=timeout + 30,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout), wall


# the last one's job also serves the node-killed run (KILL_ON): the node is killed only then
FAULTS_SPREAD = ("weight_sync_engine_wedged", "engine_server_killed", "rollout_engine_stuck")
KILL_ON = "rollout_engine_stuck"


@dataclass
class Attached:
    rc: int
    verdict: dict[str, Any]
    wall: float
    urls: dict[int, str]
    bundle: Path


@dataclass
class Killed:
    out: str
    err: str
    wall: float
    timeout: float


@dataclass
class MultiNode:
    faults: dict[str, Attached | BaseException] = field(default_factory=dict)
    killed: Killed | BaseException | None = None


def _culprit_run(head: cluster.RayHead, run: DemoRun, work: Path) -> Attached:
    rc, verdict, wall = _attach(head.dashboard_url, work / "bundle")
    return Attached(rc, verdict, wall, run.engine_urls(), work / "bundle")


def _kill_run(head: cluster.RayHead, node: cluster.RayNodeProc) -> Killed:
    """An `attach` during which the second node is killed (inside its window)."""
    timeout = 20.0
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [*CLI, "attach", head.dashboard_url, "--json", "--window", "4", "--timeout", str(timeout)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(2.5)  # sample 0 is taken; the node dies inside the window
    node.stop()
    out, err = proc.communicate(timeout=timeout + 30)
    return Killed(out, err, time.monotonic() - t0, timeout)


@scenario("multinode", long=True)
def _multinode(slot: Slot) -> MultiNode:
    """A two-node cluster of its own (not the slot's head): each fault of FAULTS_SPREAD in turn,
    attached once; on the last one's live job (an engine stuck on the second node) a second
    `attach` during which that node is killed. Each case's exception is its result."""
    work = slot.workdir("multinode")
    result = MultiNode()
    head = cluster.start_head(work, num_cpus=2)
    try:
        node = cluster.start_worker_node(
            head, work, resources={"rollout_node": 4}, num_cpus=1, node_ip_address=NODE2_IP
        )
        try:
            for fault in FAULTS_SPREAD:
                fault_work = slot.workdir(fault)
                try:
                    run = start_demo(
                        fault, workdir=fault_work / "demo", head=head, extra_args=SPREAD
                    )
                except Exception as exc:  # noqa: BLE001 - re-raised by the fault's own test
                    result.faults[fault] = exc
                    continue
                try:
                    run.wait_until_ready(timeout=150)
                    result.faults[fault] = _culprit_run(head, run, fault_work)
                    if fault == KILL_ON:
                        result.killed = _kill_run(head, node)
                except Exception as exc:  # noqa: BLE001 - re-raised by the tests
                    result.faults.setdefault(fault, exc)
                    if fault == KILL_ON and result.killed is None:
                        result.killed = exc
                finally:
                    run.stop()
        finally:
            node.stop()
    finally:
        head.stop()
    return result


@pytest.mark.live("multinode")
@pytest.mark.parametrize("fault", FAULTS_SPREAD)
def test_culprit_is_named_on_its_own_node(live_pool: LivePool, fault: str) -> None:
    """An engine stuck on the second node: the verdict names that engine and that node. With
    `weight_sync_engine_wedged` both engines there are unresponsive: the schedulers read on that
    node (through the pinned Ray task) decide which one is the odd one out of the broadcast. With
    `engine_server_killed` the dead server's URL is known only from the head of its actor's log,
    read on that node by the pinned task."""
    got = live_pool.result("multinode").faults[fault]
    if isinstance(got, BaseException):
        raise got
    rc, verdict, wall, urls = got.rc, got.verdict, got.wall, got.urls
    expected = FAULTS[fault].expected
    assert (verdict["status"], verdict["stage"]) == (expected.status, expected.stage), verdict[
        "summary"
    ]
    culprit = verdict["culprits"][0]
    wanted = expected.culprit_engines or (expected.culprit_engine,)
    # every engine blamed is one the fault expects (the engine inside the broadcast is none)
    blamed = {c["engine_url"] for c in verdict["culprits"] if c["role"] == "sglang_engine"}
    assert blamed == {urls[i] for i in wanted}, verdict["culprits"]
    assert culprit["role"] == "sglang_engine" and culprit["engine_url"] in {urls[i] for i in wanted}
    assert culprit["node_ip"] == NODE2_IP, culprit
    assert rc == 2 and wall < 30 + 5
    with open_bundle(got.bundle) as b:
        remote = [r for r in b.manifest.probes if r.node_ip == NODE2_IP]
    sources = {r.source for r in remote if r.outcome.value == "ok"}
    assert {"processes", "pyspy"} <= sources, sources  # collected there, by the pinned Ray task
    if fault == "engine_server_killed":
        assert "actor_log_head" in sources, sources
        engines = verdict["extra"]["engines"]
        assert [e["url"] for e in engines if e["state"] == "dead"] == [urls[1]], engines
    train_nodes = {p["node_ip"] for p in verdict["processes"] if p["role"] == "train_rank"}
    assert NODE2_IP not in train_nodes and len(train_nodes) == 1


@pytest.mark.live("multinode")
def test_a_node_killed_mid_run_is_a_blind_spot(live_pool: LivePool) -> None:
    """Killing the second node while the doctor samples: a named blind spot, within the deadline."""
    got = live_pool.result("multinode").killed
    if isinstance(got, BaseException):
        raise got
    assert got is not None
    assert "Traceback" not in got.err, got.err
    verdict = json.loads(got.out)
    assert got.wall < got.timeout + 1 + 2.5
    assert any(NODE2_IP in spot for spot in verdict["blind_spots"]), verdict["blind_spots"]


# issue 45 item 2: one engine's TP ranks on two nodes (SGLang's --nnodes 2, one SGLangEngine actor
# per node): the train ranks and each engine's node rank 0 on the head, node rank 1 on the second
TP_NODES = [
    "--actor-node-resource",
    "node:__internal_head__",
    "--rollout-node-resource",
    "node:__internal_head__,rollout_node",
]
TP_FAULT = "rollout_tp_rank_stuck"


@dataclass
class TpAcrossNodes:
    attached: Attached
    processes: dict[str, int]  # the demo's process labels, read while the job ran


@scenario("multinode-tp", long=True)
def _multinode_tp(slot: Slot) -> TpAcrossNodes | BaseException:
    """A two-node cluster of its own: the demo fault `rollout_tp_rank_stuck` with each engine's
    two TP ranks on two nodes (TP1, the rank that never leaves its forward, on the second),
    attached once. Its exception is its result."""
    work = slot.workdir("multinode-tp")
    head = cluster.start_head(work, num_cpus=2)
    try:
        cluster.start_worker_node(
            head, work, resources={"rollout_node": 4}, num_cpus=1, node_ip_address=NODE2_IP
        )
        run = start_demo(
            TP_FAULT, workdir=work / "demo", head=head, extra_args=TP_NODES, tp_nodes=2
        )
        try:
            run.wait_until_ready(timeout=150)
            processes = run.processes()
            return TpAcrossNodes(_culprit_run(head, run, work), processes)
        finally:
            run.stop()
    except Exception as exc:  # noqa: BLE001 - re-raised by the test
        return exc
    finally:
        head.stop()


@pytest.mark.live("multinode-tp")
def test_a_tp_rank_on_the_second_node_is_named_with_its_engine(live_pool: LivePool) -> None:
    """An engine whose TP ranks span two nodes is one engine: its node-rank-1 launcher (SGLang's
    dummy health server) is not reported as an engine, and the rank on the second node that never
    leaves its forward, while TP0 on the head waits at the batch's result, is the culprit: that
    scheduler, on that node, of that engine, in rollout generation."""
    got = live_pool.result("multinode-tp")
    if isinstance(got, BaseException):
        raise got
    attached, procs = got.attached, got.processes
    verdict, urls = attached.verdict, attached.urls
    expected = FAULTS[TP_FAULT].expected
    assert (verdict["status"], verdict["stage"]) == (expected.status, expected.stage), verdict[
        "summary"
    ]
    culprit = verdict["culprits"][0]
    assert culprit["role"] == "sglang_engine" and culprit["engine_url"] == urls[1], culprit
    assert culprit["node_ip"] == NODE2_IP, culprit
    assert culprit["pid"] == procs["engine 1 scheduler TP1"], (culprit, procs)
    assert culprit["process"] == "scheduler TP1", culprit
    # the two engines and only they: no node launcher's dummy health server among them
    assert {e["url"] for e in verdict["extra"]["engines"]} == set(urls.values())
    assert attached.rc == 2 and attached.wall < 30 + 5
    with open_bundle(attached.bundle) as b:
        remote = {
            r.source for r in b.manifest.probes if r.node_ip == NODE2_IP and r.outcome.value == "ok"
        }
    assert {"processes", "pyspy", "sockets"} <= remote, remote  # read there, by the pinned task
