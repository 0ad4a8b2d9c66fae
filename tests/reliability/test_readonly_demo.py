"""Read-only by default, on the real demo job (a Ray head, the slime-shaped job, two
SGLang stand-in engines that log every request they receive: `--sglang-request-log-dir`, which
`start_demo` always passes). The job runs with an SGLang API key (`--sglang-api-key`, so the key
sits on the engines' and the driver's command lines) and the `train_rank_stuck` fault: once it
holds, the job itself sends the engines nothing, so every request logged during a doctor run is
the doctor's.

Cases RO10 and SE6 of docs/reliability.md. The job is the live pool's shared "secret-job"
(tests/live_jobs.py), whose API key is one of the marked secrets (tests/reliability/secret_job.py)."""

from __future__ import annotations

import json
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from slime_hangdoctor_demo.launch import DemoRun
from tests.live_jobs import SECRET_JOB
from tests.live_pool import LivePool, Slot, job_part
from tests.reliability.harness import CliRun, assert_clean, run_cli
from tests.reliability.secret_job import API_KEY

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(300)]

DEMO_KEY = API_KEY  # on the engines' and the driver's command lines
ENGINE_READ_ONLY = frozenset(
    {"/model_info", "/get_model_info", "/server_info", "/get_server_info", "/v1/loads"}
    | {"/get_load", "/metrics", "/ready", "/ping"}
)


@dataclass
class Demo:
    run: DemoRun
    work: Path

    def logs(self) -> dict[str, list[dict[str, object]]]:
        out = {}
        for path in sorted((self.work / "sglang").glob("*.jsonl")):
            out[path.name] = [json.loads(x) for x in path.read_text().splitlines() if x]
        return out


def _doctor_requests(demo: Demo, *args: str) -> tuple[CliRun, list[tuple[str, str, str]]]:
    """Run the CLI; the requests the engines logged meanwhile, as (engine log, method, path)."""
    before = {name: len(lines) for name, lines in demo.logs().items()}
    assert before, "the demo engines keep no request log"
    time.sleep(1.0)
    quiet = {name: len(lines) for name, lines in demo.logs().items()}
    if quiet != before:
        pytest.fail(f"the demo job itself is still calling its engines: {before} -> {quiet}")
    result = run_cli(*args, hard_limit_s=120.0)
    assert_clean(result, bound_s=120.0)
    new = [
        (name, str(r["method"]), str(r["path"]))
        for name, lines in demo.logs().items()
        for r in lines[before.get(name, 0) :]
    ]
    return result, new


def _assert_read_only(new: list[tuple[str, str, str]], engines: set[str]) -> None:
    assert {name for name, _, _ in new} == engines, f"not every engine was probed: {new}"
    bad = [r for r in new if r[1] != "GET" or r[2] not in ENGINE_READ_ONLY]
    assert not bad, f"non read-only calls to the demo's engines: {bad}"


@dataclass
class ReadOnlyRuns:
    engines: set[str]  # the engines' request logs
    attach: CliRun
    attach_requests: list[tuple[str, str, str]]
    bundle: Path
    check: CliRun
    check_requests: list[tuple[str, str, str]]


@job_part(SECRET_JOB, "readonly", order=1)
def _readonly(run: DemoRun, slot: Slot, work: Path) -> ReadOnlyRuns:
    """A default `attach --bundle`, then a default `check`, each with the requests the engines
    logged during it."""
    demo = Demo(run, run.workdir)
    url = run.head.dashboard_url
    out = work / "bundle"
    attach, attach_new = _doctor_requests(demo, "attach", url, "--bundle", str(out), "-f", "json")
    state = str(work / "state.json")
    check, check_new = _doctor_requests(demo, "check", url, "--state-file", state, "--json")
    return ReadOnlyRuns(set(demo.logs()), attach, attach_new, out, check, check_new)


@pytest.mark.live(f"{SECRET_JOB}/readonly")
def test_attach_on_the_demo_is_read_only_and_keeps_the_key_out(live_pool: LivePool) -> None:
    """RO10 + SE6: a default `attach` on the demo's Ray cluster sends its engines only the
    read-only GETs; the API key (on the engines' and driver's command lines and in the Job API's
    entrypoint) appears nowhere in the bundle, its tarball or the report."""
    runs: ReadOnlyRuns = live_pool.result(f"{SECRET_JOB}/readonly")
    result, out = runs.attach, runs.bundle
    _assert_read_only(runs.attach_requests, runs.engines)
    assert result.verdict()["status"] == "hung"
    blobs = [f.read_bytes() for f in out.rglob("*") if f.is_file()]
    with tarfile.open(f"{out}.tar.gz", "r:gz") as tar:
        blobs += [fh.read() for m in tar.getmembers() if (fh := tar.extractfile(m)) is not None]
    blobs += [result.stdout.encode(), result.stderr.encode()]
    assert not [b for b in blobs if DEMO_KEY.encode() in b], "the demo's API key leaked"
    assert any(b"--sglang-api-key" in b for b in blobs), "the entrypoint was not in the bundle"


@pytest.mark.live(f"{SECRET_JOB}/readonly")
def test_check_on_the_demo_is_read_only(live_pool: LivePool) -> None:
    """RO10: a default `check` (the cron watchdog) too."""
    runs: ReadOnlyRuns = live_pool.result(f"{SECRET_JOB}/readonly")
    _assert_read_only(runs.check_requests, runs.engines)
