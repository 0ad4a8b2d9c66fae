"""The cron flow against the live demo job: `check` every few seconds, as cron would run it.

A healthy job stays 0 for the whole test; a job that stalls after a few healthy steps turns 1, then 2
within --stall-after plus one interval, with an evidence bundle, a Prometheus textfile that
prometheus_client parses, a JSON-lines log and the on-stall hook's output.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slime_hangdoctor.demo import cluster
from slime_hangdoctor.demo.launch import start_demo

pytestmark = [pytest.mark.ray, pytest.mark.slow]

INTERVAL_S = 4.0
STALL_AFTER_S = 10.0


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[cluster.RayHead]:
    h = cluster.start_head(tmp_path_factory.mktemp("watchdog-head"), num_cpus=2)
    try:
        yield h
    finally:
        h.stop()


def check(address: str, work: Path) -> tuple[int, float]:
    """One cron tick of the real CLI; returns (exit code, wall seconds)."""
    t0 = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "slime_hangdoctor",
            "check",
            address,
            "--stall-after",
            f"{STALL_AFTER_S:.0f}s",
            "--window",
            "2",
            "--timeout",
            "25",
            "--state-file",
            str(work / "state.json"),
            "--bundle-dir",
            str(work / "bundles"),
            "--prom-file",
            str(work / "hangdoctor.prom"),
            "--log-file",
            str(work / "runs.jsonl"),
            "--on-stall-exec",
            f"cat > {work / 'hook.json'}",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    json.loads(proc.stdout)  # every run prints a verdict
    return proc.returncode, time.monotonic() - t0


def ticks(address: str, work: Path, n: int) -> list[tuple[float, int]]:
    """`n` runs one INTERVAL_S apart: [(seconds since the first, exit code)]."""
    out: list[tuple[float, int]] = []
    t0 = time.monotonic()
    for i in range(n):
        rc, _wall = check(address, work)
        out.append((time.monotonic() - t0, rc))
        time.sleep(max(0.0, t0 + (i + 1) * INTERVAL_S - time.monotonic()))
    return out


def test_a_healthy_job_stays_ok(head: cluster.RayHead, tmp_path: Path) -> None:
    """No false alarm: every tick on a progressing job exits 0."""
    run = start_demo("none", workdir=tmp_path / "demo", head=head)
    try:
        run.wait_until_ready(timeout=150)
        codes = [rc for _t, rc in ticks(head.dashboard_url, tmp_path, 4)]
    finally:
        run.stop()
    assert codes == [0, 0, 0, 0]
    assert not (tmp_path / "hook.json").exists()


def test_a_stall_turns_warning_then_critical_with_evidence(
    head: cluster.RayHead, tmp_path: Path
) -> None:
    """Healthy first, then an engine gets stuck: 0 ... 1 ... 2 within --stall-after + one interval."""
    from prometheus_client.parser import text_string_to_metric_families

    run = start_demo(
        "rollout_engine_stuck", workdir=tmp_path / "demo", head=head, fault_after_steps=3
    )
    try:
        run.wait_until_ready(timeout=150)
        seen = ticks(head.dashboard_url, tmp_path, 7)
    finally:
        run.stop()
    codes = [rc for _t, rc in seen]
    assert 1 in codes and 2 in codes, seen
    first_warn = next(t for t, rc in seen if rc == 1)
    first_crit = next(t for t, rc in seen if rc == 2)
    assert codes.index(1) < codes.index(2)
    assert first_crit - first_warn <= STALL_AFTER_S + INTERVAL_S + 6.0, seen
    # evidence: one stall bundle, the hook got the verdict, the textfile parses
    bundles = sorted((tmp_path / "bundles").glob("stall-*"))
    assert any((b / "manifest.json").is_file() for b in bundles if b.is_dir()), bundles
    hook = json.loads((tmp_path / "hook.json").read_text())
    assert hook["status"] == "hung" and hook["stage"] == "rollout_dispatch" and hook["bundle"]
    families = {
        f.name: f
        for f in text_string_to_metric_families((tmp_path / "hangdoctor.prom").read_text())
    }
    stalled = [
        s
        for s in families["slime_hangdoctor_stalled"].samples
        if s.labels.get("stage") == "rollout_dispatch"
    ]
    assert stalled and stalled[0].value == 1.0
    assert families["slime_hangdoctor_seconds_since_progress"].samples[0].value >= STALL_AFTER_S
    lines = [json.loads(line) for line in (tmp_path / "runs.jsonl").read_text().splitlines()]
    assert [line["exit_code"] for line in lines] == codes
    assert sum(1 for line in lines if line["new_stall"]) == 1  # one alert per stall


def test_overlapping_runs_do_not_pile_up(head: cluster.RayHead, tmp_path: Path) -> None:
    """Two checks at once on the same state file: one runs, the other exits 3 at once."""
    cmd = [
        sys.executable,
        "-m",
        "slime_hangdoctor",
        "check",
        head.dashboard_url,
        "--window",
        "3",
        "--state-file",
        str(tmp_path / "state.json"),
        "--json",
    ]
    first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.5)
    t0 = time.monotonic()
    second = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    quick = time.monotonic() - t0
    first.communicate(timeout=60)
    assert second.returncode == 3 and "another check is still running" in second.stdout
    assert quick < 8.0  # refused at once, not after waiting for the first run
