"""The textfile's labels (watchdog/prom.py, issue 43 items 5 and 7): a culprit without a process
(Ray lists an actor not yet placed with pid 0) is written with an empty `pid` label, as one with
no pid at all (to Prometheus an empty label is no label), never "0"; a real pid as its number.
The page's one series (`slime_hangdoctor_page_info`) is there on every run, and names the
submission id of the job the analysis found and the stall bundle.

The verdicts are those of recorded bundles (tests/fixtures/analysis/demo), their culprit's pid
set by `dataclasses.replace` (a named transformation of a real verdict)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from slime_hangdoctor import __version__
from slime_hangdoctor.verdict import ExitCode, Verdict
from slime_hangdoctor.watchdog.decide import CheckDecision
from slime_hangdoctor.watchdog.prom import write_prom_file
from slime_hangdoctor.watchdog.state import WatchState

ROOT = Path(__file__).resolve().parents[2]


def _hung() -> Verdict:
    from slime_hangdoctor.pipeline import analyse_bundle

    bundle = ROOT / "tests/fixtures/analysis/demo/rollout_engine_stuck.tar.gz"
    if not bundle.exists():
        pytest.skip(f"{bundle} not recorded")
    verdict = analyse_bundle(bundle).diagnosis.verdict
    assert verdict.culprits, "the recorded stall names a culprit"
    return verdict


def _samples(tmp_path: Path, verdict: Verdict, bundle: str | None = None) -> dict:
    decision = CheckDecision(ExitCode.CRITICAL, 100.0, WatchState(), False)
    path = tmp_path / "hd.prom"
    assert write_prom_file(path, verdict, decision, {}, now=1.0, duration_s=0.1, bundle=bundle) is None
    out: dict = {}
    for family in text_string_to_metric_families(path.read_text()):
        for s in family.samples:
            out.setdefault(s.name, []).append(s.labels)
    return out


@pytest.mark.parametrize("pid", [0, None, -1])
def test_a_culprit_without_a_process_has_an_empty_pid_label(tmp_path: Path, pid: int | None) -> None:
    verdict = _hung()
    c = dataclasses.replace(verdict.culprits[0], pid=pid)
    got = _samples(tmp_path, dataclasses.replace(verdict, culprits=(c,)))
    assert [row["pid"] for row in got["slime_hangdoctor_culprit_info"]] == [""]
    assert [row["pid"] for row in got["slime_hangdoctor_page_info"]] == [""]


def test_a_culprit_with_a_process_has_its_pid(tmp_path: Path) -> None:
    verdict = _hung()
    pid = verdict.culprits[0].pid
    assert pid and pid > 0
    got = _samples(tmp_path, verdict, bundle="/var/lib/slime-hangdoctor/bundles/stall-x")
    assert got["slime_hangdoctor_culprit_info"][0]["pid"] == str(pid)
    page = got["slime_hangdoctor_page_info"]
    assert len(page) == 1 and page[0]["pid"] == str(pid)
    assert page[0]["role"] == verdict.culprits[0].role.value
    assert page[0]["bundle"] == "/var/lib/slime-hangdoctor/bundles/stall-x"
    assert got["slime_hangdoctor_build_info"] == [{"version": __version__}]


def test_the_page_names_the_running_jobs_submission_id(tmp_path: Path) -> None:
    verdict = _hung()
    job = verdict.extra.get("job")
    assert isinstance(job, dict) and job.get("job_id"), verdict.extra.keys()
    got = _samples(tmp_path, verdict)
    assert got["slime_hangdoctor_page_info"][0]["submission_id"] == (
        job.get("submission_id") or job["job_id"]
    )
    none = _samples(tmp_path, dataclasses.replace(verdict, culprits=(), extra={}))
    assert none["slime_hangdoctor_page_info"] == [
        {"role": "", "node_ip": "", "pid": "", "submission_id": "", "bundle": ""}
    ]
