"""The cron flow against the live demo job: `check` every few seconds, as cron would run it.

A healthy job stays 0 for the whole test (after the first run, without taking stacks); a job that
stalls after a few healthy steps turns 1, then 2 within --stall-after plus one interval, with an
evidence bundle, a Prometheus textfile that prometheus_client parses, a JSON-lines log and the
on-stall hook's output; once alerted, runs carry the stall's verdict while nothing moves.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from slime_hangdoctor_demo.launch import DemoRun
from tests.integration.cli import CLI, run_cli
from tests.live_jobs import NONE_JOB, STALL_JOB
from tests.live_pool import LivePool, Slot, job_part, scenario

pytestmark = [pytest.mark.ray, pytest.mark.slow]

INTERVAL_S = 4.0
STALL_AFTER_S = 10.0


def check(address: str, work: Path) -> tuple[int, dict[str, Any]]:
    """One cron tick of the real CLI; returns (exit code, the verdict it printed)."""
    proc, _wall = run_cli(
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
        timeout=90,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout)  # every run prints a verdict


def ticks(address: str, work: Path, n: int) -> list[tuple[float, int, dict[str, Any]]]:
    """`n` runs one INTERVAL_S apart: [(seconds since the first, exit code, verdict)]."""
    out: list[tuple[float, int, dict[str, Any]]] = []
    t0 = time.monotonic()
    for i in range(n):
        rc, verdict = check(address, work)
        out.append((time.monotonic() - t0, rc, verdict))
        time.sleep(max(0.0, t0 + (i + 1) * INTERVAL_S - time.monotonic()))
    return out


def stacks_skipped(verdict: dict[str, Any]) -> bool:
    return any(f["rule"] == "watchdog.stacks_skipped" for f in verdict["findings"])


def counters_only(verdict: dict[str, Any]) -> bool:
    """The run's counters-only look gave the verdict (analysis/counters.py)."""
    return "counter_look" in verdict.get("extra", {})


def carried(verdict: dict[str, Any]) -> bool:
    return any(f["rule"] == "watchdog.carried" for f in verdict["findings"])


Ticks = list[tuple[float, int, dict[str, Any]]]


@job_part(NONE_JOB, "watchdog", order=0)
def _healthy(run: DemoRun, slot: Slot, work: Path) -> tuple[Path, Ticks]:
    """4 ticks on the progressing demo job."""
    return work, ticks(slot.head.dashboard_url, work, 4)


@pytest.mark.live(f"{NONE_JOB}/watchdog")
def test_a_healthy_job_stays_ok(live_pool: LivePool) -> None:
    """No false alarm: every tick on a progressing job exits 0."""
    work, seen = live_pool.result(f"{NONE_JOB}/watchdog")
    assert [rc for _t, rc, _v in seen] == [0, 0, 0, 0]
    assert not (work / "hook.json").exists()
    # The first run takes stacks (nothing remembered yet); once a run has seen work move in its
    # window, the next ones look without py-spy as long as work keeps moving.
    assert not stacks_skipped(seen[0][2])
    skipped = [v for _t, _rc, v in seen[1:] if stacks_skipped(v)]
    assert skipped, [v["findings"] for _t, _rc, v in seen]
    assert all(v["status"] == "progressing" for v in skipped)
    # Once a look has judged the job progressing on its engines' tokens, the next runs read only
    # those counters (and this node's processes): no Ray state, no scan, no analysis.
    counted = [v for _t, _rc, v in seen[1:] if counters_only(v)]
    assert counted, [v["findings"] for _t, _rc, v in seen]
    assert all(v["status"] == "progressing" and not v["processes"] for v in counted)


@job_part(STALL_JOB, "watchdog", order=0)
def _stall(run: DemoRun, slot: Slot, work: Path) -> tuple[Path, Ticks]:
    """9 ticks on the demo job whose engine gets stuck after a few healthy steps."""
    return work, ticks(slot.head.dashboard_url, work, 9)


@pytest.mark.live(f"{STALL_JOB}/watchdog")
def test_a_stall_turns_warning_then_critical_with_evidence(live_pool: LivePool) -> None:
    """Healthy first, then an engine gets stuck: 0 ... 1 ... 2 within --stall-after + one interval."""
    from prometheus_client.parser import text_string_to_metric_families

    work, seen = live_pool.result(f"{STALL_JOB}/watchdog")
    codes = [rc for _t, rc, _v in seen]
    assert 1 in codes and 2 in codes, seen
    first_warn = next(t for t, rc, _v in seen if rc == 1)
    first_crit = next(t for t, rc, _v in seen if rc == 2)
    assert codes.index(1) < codes.index(2)
    assert first_crit - first_warn <= STALL_AFTER_S + INTERVAL_S + 6.0, seen
    # evidence: one stall bundle, the hook got the verdict, the textfile parses
    bundles = sorted((work / "bundles").glob("stall-*"))
    assert any((b / "manifest.json").is_file() for b in bundles if b.is_dir()), bundles
    hook = json.loads((work / "hook.json").read_text())
    assert hook["status"] == "hung" and hook["stage"] == "rollout_dispatch" and hook["bundle"]
    # a stalled run is judged on stacks, whatever the runs before it skipped
    assert not any(stacks_skipped(v) for _t, rc, v in seen if rc != 0)
    assert all(v["status"] == "hung" for _t, rc, v in seen if rc == 2)
    # once alerted, a run in which nothing moved carries the last full look's verdict
    after = seen[codes.index(2) + 1 :]
    assert after, seen
    assert all(rc == 2 and v["stage"] == "rollout_dispatch" for _t, rc, v in after), after
    assert any(carried(v) for _t, _rc, v in after), [v["findings"] for _t, _rc, v in after]
    assert not any(carried(v) for _t, rc, v in seen if rc != 2)
    families = {
        f.name: f for f in text_string_to_metric_families((work / "hangdoctor.prom").read_text())
    }
    stalled = [
        s
        for s in families["slime_hangdoctor_stalled"].samples
        if s.labels.get("stage") == "rollout_dispatch"
    ]
    assert stalled and stalled[0].value == 1.0
    # the Grafana dashboard and the alert rules (slime_hangdoctor/monitoring/) query only metrics
    # this real run of the watchdog wrote, on a hung job with its culprit
    from tests.unit.test_monitoring import queried_metrics

    written = {s.name for f in families.values() for s in f.samples}
    assert queried_metrics() <= written, queried_metrics() - written
    assert families["slime_hangdoctor_seconds_since_progress"].samples[0].value >= STALL_AFTER_S
    lines = [json.loads(line) for line in (work / "runs.jsonl").read_text().splitlines()]
    assert [line["exit_code"] for line in lines] == codes
    assert sum(1 for line in lines if line["new_stall"]) == 1  # one alert per stall


@scenario("watchdog:overlap")
def _overlap(slot: Slot) -> tuple[subprocess.CompletedProcess[str], float]:
    """Two checks at once on the same state file (on the slot's head, between jobs)."""
    work = slot.workdir("watchdog-overlap")
    args = ("check", slot.head.dashboard_url, "--window", "3")
    args += ("--state-file", str(work / "state.json"), "--json")
    first = subprocess.Popen(
        [*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    time.sleep(1.5)
    second, quick = run_cli(*args)
    first.communicate(timeout=60)
    return second, quick


@pytest.mark.live("watchdog:overlap")
def test_overlapping_runs_do_not_pile_up(live_pool: LivePool) -> None:
    """Two checks at once on the same state file: one runs, the other exits 3 at once."""
    second, quick = live_pool.result("watchdog:overlap")
    assert second.returncode == 3 and "another check is still running" in second.stdout
    assert quick < 8.0  # refused at once, not after waiting for the first run
