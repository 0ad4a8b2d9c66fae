"""`attach` against the live demo slime job: every fault's verdict names the right stage and culprit.

One real Ray head (with dashboard) serves the whole module; each fault is a real job submitted through
the Job API, diagnosed by the real CLI in a subprocess (py-spy, HTTP to the SGLang stand-ins, Ray's
state API), then stopped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from slime_hangdoctor.demo import cluster
from slime_hangdoctor.demo.faults import FAULTS
from slime_hangdoctor.demo.launch import DemoRun, start_demo
from tests.integration.cli import run_cli

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


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_attach_names_the_stage_and_the_culprit(
    head: cluster.RayHead, fault: str, tmp_path: Path
) -> None:
    """Each demo fault: status, blocked stage and culprit process as the fault registry expects."""
    # GIVEN a live demo job that has reached its fault
    run = start_demo(fault, workdir=tmp_path / "demo", head=head)
    try:
        run.wait_until_ready(timeout=150)
        # WHEN the doctor attaches through the dashboard address
        rc, verdict, _err, wall = attach(head.dashboard_url, "--out", str(tmp_path / "bundle"))
    finally:
        run.stop()
    # THEN
    expected = FAULTS[fault].expected
    assert verdict["schema"] == "slime-hangdoctor.verdict/1"
    assert (verdict["status"], verdict["stage"]) == (expected.status, expected.stage), verdict[
        "summary"
    ]
    _check_culprit(verdict, run, fault)
    assert rc == verdict["exit_code"] and rc in ((1, 2) if expected.status == "hung" else (0,))
    assert wall < TIMEOUT_S + 5
    assert (tmp_path / "bundle" / "manifest.json").is_file()
    assert (tmp_path / "bundle.tar.gz").is_file()


def test_attach_to_a_cluster_without_a_slime_job_is_idle(head: cluster.RayHead) -> None:
    """A cluster whose job finished (or never ran one) is idle, exit 0."""
    rc, verdict, _err, _wall = attach(head.dashboard_url)
    assert verdict["status"] == "idle" and rc == 0, verdict


@pytest.mark.parametrize("form", ["gcs", "auto_env"])
def test_address_forms_reach_the_same_cluster(head: cluster.RayHead, form: str) -> None:
    """host:6379 (GCS) and RAY_ADDRESS both find the dashboard."""
    import os

    if form == "gcs":
        rc, verdict, _err, _ = attach(head.gcs_address)
    else:
        env = {**os.environ, "RAY_ADDRESS": head.gcs_address}
        proc, _wall = run_cli("attach", "--json", "--window", "1", env=env)
        rc, verdict = proc.returncode, json.loads(proc.stdout)
    assert verdict["status"] == "idle" and rc == 0, verdict


def test_dead_address_ends_within_the_deadline_with_exit_3() -> None:
    """A wrong address: exit 3, within the deadline, naming the address forms it tried."""
    proc, wall = run_cli("attach", "127.0.0.1:1", "--timeout", "5", "--json")
    assert proc.returncode == 3 and "Traceback" not in proc.stderr
    verdict = json.loads(proc.stdout)
    assert verdict["status"] == "unknown"
    assert "127.0.0.1:1" in verdict["summary"]
    assert wall < 5 + 3
