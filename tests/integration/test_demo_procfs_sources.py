"""Demo faults that only the node-local procfs sources reveal, diagnosed live by the real CLI.

`engine_paused_by_update` (AReaL#1160): engine 1 pauses generation again after a weight update and
nothing continues it. Its stacks look idle, its scheduler reports nothing running or queued, and the
Ray task history shows a balanced pause / continue; only the RolloutManager's TCP connections to
engine 1, held across both samples, say where the rollout's requests are."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slime_hangdoctor import bundle as b
from slime_hangdoctor.bundle import open_bundle
from slime_hangdoctor.demo import cluster
from slime_hangdoctor.demo.faults import FAULTS
from slime_hangdoctor.demo.launch import start_demo
from tests.integration.cli import run_cli

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(400)]


def test_engine_paused_by_update_is_found_by_its_held_connections(
    head: cluster.RayHead, tmp_path: Path
) -> None:
    fault = "engine_paused_by_update"
    run = start_demo(fault, workdir=tmp_path / "demo", head=head)
    try:
        run.wait_until_ready(timeout=200)
        urls = run.engine_urls()
        proc, _wall = run_cli(
            "attach",
            head.dashboard_url,
            "--json",
            "--window",
            "3",
            "--timeout",
            "25",
            "--out",
            str(tmp_path / "bundle"),
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
    top = verdict["culprits"][0]
    assert top["role"] == "sglang_engine" and top["engine_url"] == urls[1], verdict["summary"]
    held = next(f for f in verdict["findings"] if f["rule"] == "requests-held-outside-scheduler")
    assert any(urls[1] in e and "rollout manager" in e for e in held["evidence"]), held
    assert not any(urls[0] in e for e in held["evidence"]), held  # the healthy engine is not named
    culprit = next(f for f in verdict["findings"] if f["rule"] == "culprit")
    assert any(e.startswith("[sockets]") for e in culprit["evidence"]), culprit
    with open_bundle(tmp_path / "bundle") as bundle:
        sources = {r.source for r in bundle.manifest.probes if r.outcome.value == "ok"}
    assert {b.SOCKETS, b.KERNEL} <= sources
