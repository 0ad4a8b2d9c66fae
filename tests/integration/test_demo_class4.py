"""Issue 16 class 4 live: the rollout waits on I/O and no engine has a request. The real CLI attaches
to the demo job; the evidence that says where the requests are decides the verdict.

- `rollout_behind_proxy` (slime#1026): the RolloutManager runs with the master node's http_proxy,
  a proxy that accepts and never answers; every engine is idle. The environment source (its
  proxy variables) and its sockets (connections held at the proxy) name the cause.
- `rollout_slots_leaked`: the rollout's concurrency slots leaked after three healthy rollouts;
  nothing leaves the RolloutManager. Ray's task history (generate far longer than before) and
  its sockets (no connection to any engine) blame it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from slime_hangdoctor.demo import cluster
from slime_hangdoctor.demo.faults import FAULTS
from slime_hangdoctor.demo.launch import start_demo
from tests.integration.cli import run_cli

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(400)]


def _attach(head: cluster.RayHead, fault: str, tmp_path: Path) -> tuple[dict[str, Any], int]:
    run = start_demo(fault, workdir=tmp_path / "demo", head=head)
    try:
        run.wait_until_ready(timeout=200)
        rm_pid = run.roles().get("rollout_manager")
        proc, _wall = run_cli(
            "attach",
            head.dashboard_url,
            "--json",
            "--window",
            "3",
            "--timeout",
            "25",
            timeout=60,
        )
    finally:
        run.stop()
    assert "Traceback" not in proc.stderr, proc.stderr
    verdict = json.loads(proc.stdout)
    expected = FAULTS[fault].expected
    assert (verdict["status"], verdict["stage"]) == (expected.status, expected.stage), verdict[
        "summary"
    ]
    assert [c["role"] for c in verdict["culprits"]] == [expected.culprit_role], verdict["summary"]
    assert rm_pid is not None and verdict["culprits"][0]["pid"] == rm_pid
    return verdict, rm_pid


def _finding(verdict: dict[str, Any], rule: str) -> dict[str, Any]:
    found = next((f for f in verdict["findings"] if f["rule"] == rule), None)
    assert found is not None, [f["rule"] for f in verdict["findings"]]
    return found


def test_rollout_behind_a_proxy_is_the_proxys_cause(head: cluster.RayHead, tmp_path: Path) -> None:
    verdict, rm_pid = _attach(head, "rollout_behind_proxy", tmp_path)
    culprit = _finding(verdict, "culprit")
    assert "environ" in culprit["message"], culprit
    cause = _finding(verdict, "requests-at-proxy")
    assert any(
        e.startswith("[environ]") and f"pid {rm_pid}" in e and "connection(s) to the proxy" in e
        for e in cause["evidence"]
    ), cause
    assert not any(f["rule"] == "requests-held-outside-scheduler" for f in verdict["findings"])


def test_leaked_rollout_slots_blame_the_rollout_manager_on_its_evidence(
    head: cluster.RayHead, tmp_path: Path
) -> None:
    verdict, _rm_pid = _attach(head, "rollout_slots_leaked", tmp_path)
    culprit = _finding(verdict, "culprit")
    assert "ray_tasks" in culprit["message"] and "rollout" in culprit["message"], culprit
    assert any(e.startswith("[ray_tasks]") and "generate for" in e for e in culprit["evidence"])
    assert any(e.startswith("[sockets]") and "no connection" in e for e in culprit["evidence"])
    assert not any(f["rule"] == "requests-at-proxy" for f in verdict["findings"])
