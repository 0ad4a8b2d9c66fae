"""No silent green (issue 43 item 4): a watchdog that finds no job says so.

The real CLI `check --local --uid U` on this machine, U a user who runs no process here (the
`nobody` account): its scan finds no slime process, so the verdict is IDLE. Without
`--expect-job` that stays OK (exit 0) and the textfile says `slime_hangdoctor_job_seen 0`; with
`--expect-job` or SLIME_HANGDOCTOR_EXPECT_JOB=1 it is UNKNOWN (exit 3) with the reason.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _nobody() -> int:
    try:
        uid = pwd.getpwnam("nobody").pw_uid
    except KeyError:
        pytest.skip("no `nobody` account on this machine")
    import psutil

    if any(p.info["uids"] and p.info["uids"].real == uid for p in psutil.process_iter(["uids"])):
        pytest.skip("`nobody` runs processes on this machine")
    return uid


def _check(tmp_path: Path, *extra: str, env: dict[str, str] | None = None) -> tuple[int, dict]:
    prom = tmp_path / "hd.prom"
    done = subprocess.run(
        [
            sys.executable, "-m", "slime_hangdoctor", "check", "--local", "--uid", str(_nobody()),
            "--window", "0.5", "--state-file", str(tmp_path / "st" / "state.json"),
            "--prom-file", str(prom), "--json", *extra,
        ],
        capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
    )  # fmt: skip
    verdict = json.loads(done.stdout)
    from prometheus_client.parser import text_string_to_metric_families

    seen = {
        s.name: s.value
        for f in text_string_to_metric_families(prom.read_text())
        for s in f.samples
        if s.name == "slime_hangdoctor_job_seen"
    }
    verdict["job_seen"] = seen["slime_hangdoctor_job_seen"]
    return done.returncode, verdict


def test_no_job_found_is_ok_and_the_textfile_says_no_job_was_seen(tmp_path: Path) -> None:
    rc, verdict = _check(tmp_path)
    assert (rc, verdict["status"], verdict["job_seen"]) == (0, "idle", 0.0)


@pytest.mark.parametrize("how", ["option", "environment"])
def test_expect_job_turns_no_job_found_into_unknown_with_the_reason(
    tmp_path: Path, how: str
) -> None:
    if how == "option":
        rc, verdict = _check(tmp_path, "--expect-job")
    else:
        rc, verdict = _check(tmp_path, env={"SLIME_HANGDOCTOR_EXPECT_JOB": "1"})
    assert (rc, verdict["status"], verdict["job_seen"]) == (3, "unknown", 0.0)
    assert "--expect-job" in verdict["summary"] and "No slime job" in verdict["summary"]
    assert "watchdog.expect_job" in {f["rule"] for f in verdict["findings"]}
