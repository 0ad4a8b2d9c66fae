"""Log tails through a real Ray 2.60 head's log API: the driver's log and each slime actor's err/out,
bounded, with an outcome per file; end to end through `collect` into the verdict's log findings."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from slime_hangdoctor.analysis.diagnosis import diagnose
from slime_hangdoctor.bundle import BundleWriter, open_bundle
from slime_hangdoctor.collect.dashboard import DashboardClient
from slime_hangdoctor.collect.logs import fetch_logs
from slime_hangdoctor.collect.options import CollectOptions
from slime_hangdoctor.collect.run import collect
from slime_hangdoctor.load import load_snapshot
from slime_hangdoctor.outcome import Outcome
from slime_hangdoctor.parsers.logs import RAY_LOGS
from slime_hangdoctor.parsers.logs import SPEC as LOGS
from slime_hangdoctor.parsers.ray_state import RayActor, RayJob, parse_actors, parse_jobs
from slime_hangdoctor.topology import build_topology
from slime_hangdoctor_demo.cluster import (
    RayHead,
    free_ports,
    start_head,
    stop_job,
    submit_job,
    wait_for_job_status,
)
from tests.fixtures.capture_ray_logs import LOG_JOB

# a real Ray head (the module's fixture) serves every test here: outside the fast subset
pytestmark = pytest.mark.ray


@dataclass(frozen=True)
class LogJob:
    head: RayHead
    submission_id: str
    jobs: tuple[RayJob, ...]
    actors: tuple[RayActor, ...]


@pytest.fixture(scope="module")
def log_job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LogJob]:
    work = tmp_path_factory.mktemp("ray-logs")
    head = start_head(work / "head")
    try:
        (work / "job").mkdir()
        (work / "job" / "driver.py").write_text(LOG_JOB)
        sid = submit_job(
            head, f"{sys.executable} driver.py", working_dir=work / "job", submission_id="logs-1"
        )
        wait_for_job_status(head, sid, ("RUNNING",), timeout=90)
        client = DashboardClient(head.dashboard_url, token="", timeout=5.0)
        deadline = time.monotonic() + 120
        while True:
            actors = parse_actors(client.get("/api/v0/actors", {"detail": "1"}).body)
            slime = [a for a in actors if a.class_name != "JobSupervisor"]
            if len(slime) == 3 and all(a.state == "ALIVE" for a in slime):
                break
            assert time.monotonic() < deadline, [(a.class_name, a.state) for a in actors]
            time.sleep(0.5)
        time.sleep(3.0)  # the actors write their lines
        jobs = parse_jobs(client.get("/api/jobs/").body)
        yield LogJob(head, sid, tuple(jobs), tuple(actors))
        stop_job(head, sid)
    finally:
        head.stop()


def test_every_slime_actor_and_the_driver_get_a_bounded_tail(
    log_job: LogJob, tmp_path: Path
) -> None:
    writer = BundleWriter(tmp_path / "bundle", command="test")
    client = DashboardClient(log_job.head.dashboard_url, token="", timeout=5.0)
    t0 = time.monotonic()
    records = fetch_logs(writer, client, log_job.jobs, log_job.actors, timeout=5.0)
    elapsed = time.monotonic() - t0
    by_target = {r.target: r for r in records}
    assert f"driver-{log_job.submission_id}" in by_target
    classes = {r.meta.get("class_name") for r in records if r.meta.get("kind") == "actor"}
    assert classes == {"MegatronTrainRayActor", "SGLangEngine", "RolloutManager"}
    assert len(records) == 1 + 3 * 2
    assert all(r.outcome is Outcome.OK and r.source == RAY_LOGS for r in records), (
        records
    )
    assert all(r.meta["lines"] == 400 for r in records)
    err = next(
        r for r in records if r.target.startswith("MegatronTrainRayActor") and "err" in r.target
    )
    assert b"Timer actor_train start" in (writer.root / str(err.artifact)).read_bytes()
    assert elapsed < 10.0


def test_the_budget_leaves_actors_out_by_name_and_cuts_big_tails(
    log_job: LogJob, tmp_path: Path
) -> None:
    writer = BundleWriter(tmp_path / "bundle", command="test")
    client = DashboardClient(log_job.head.dashboard_url, token="", timeout=5.0)
    records = fetch_logs(
        writer, client, log_job.jobs, log_job.actors, timeout=5.0, max_actors=1, budget_bytes=1
    )
    left = [r for r in records if r.target == "actors-left-out"]
    assert len(left) == 1 and left[0].outcome is Outcome.UNAVAILABLE
    assert "2 slime actor(s)" in str(left[0].reason)
    tails = [r for r in records if r.artifact]
    assert {r.meta["class_name"] for r in tails if r.meta["kind"] == "actor"} == {"RolloutManager"}
    assert all(r.meta["max_bytes"] == 4096 for r in tails)
    assert all((writer.root / str(r.artifact)).stat().st_size <= 4096 for r in tails)


def test_an_unreachable_dashboard_is_a_record_per_file_never_an_exception(
    log_job: LogJob, tmp_path: Path
) -> None:
    writer = BundleWriter(tmp_path / "bundle", command="test")
    dead = DashboardClient(f"http://127.0.0.1:{free_ports(1)[0]}", token="", timeout=1.0)
    records = fetch_logs(writer, dead, log_job.jobs, log_job.actors, timeout=1.0)
    assert records and all(r.outcome is not Outcome.OK and r.reason for r in records)


def test_collect_fetches_logs_between_the_samples_and_the_verdict_cites_them(
    log_job: LogJob, tmp_path: Path
) -> None:
    opts = CollectOptions(window_s=1.0, timeout_s=40.0, probe_timeout_s=5.0)
    result = collect(log_job.head.dashboard_url, opts, tmp_path / "bundle", command="test")
    logs = [r for r in result.manifest.probes if r.source == RAY_LOGS]
    assert logs and all(r.outcome is Outcome.OK for r in logs)
    # started once the first sample is in, before the second one (the window's idle wait)
    first_sample, second_sample = result.manifest.sample_times[:2]
    assert first_sample <= min(r.started_at for r in logs) < second_sample
    snap = load_snapshot(open_bundle(result.root))
    assert len(snap.facts(LOGS)) == len(logs)
    verdict = diagnose(snap, build_topology(snap)).verdict
    rules = {f.rule for f in verdict.findings}
    assert "log-cache-not-flushed" in rules
    assert "log-open-timer" in rules
    # the RolloutManager's logged TimeoutError (miles#1585's "Timeout while flushing cache.")
    errors = [f.message for f in verdict.findings if f.rule == "log-errors"]
    assert any("TimeoutError: Timeout while flushing cache." in m for m in errors), errors
