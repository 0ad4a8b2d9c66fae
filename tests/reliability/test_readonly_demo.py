"""Read-only by default, on the real demo job (a private Ray head, the slime-shaped job, two
SGLang stand-in engines that log every request they receive: `--sglang-request-log-dir`, which
`start_demo` always passes). The job runs with an SGLang API key (`--sglang-api-key`, so the key
sits on the engines' and the driver's command lines) and the `train_rank_stuck` fault: once it
holds, the job itself sends the engines nothing, so every request logged during a doctor run is
the doctor's.

Cases RO10 and SE6 of docs/reliability.md. One demo run for the module (~30-40 s)."""

from __future__ import annotations

import json
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from slime_hangdoctor.demo.launch import DemoRun, start_demo
from tests.reliability.harness import CliRun, assert_clean, run_cli

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(300)]

DEMO_KEY = "SECRET-demo-sglang-key-5a7c9e1b3d"
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


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    work = tmp_path_factory.mktemp("demo")
    run = start_demo("train_rank_stuck", workdir=work, extra_args=["--sglang-api-key", DEMO_KEY])
    try:
        run.wait_until_ready(timeout=150.0)
        yield Demo(run, work)
    finally:
        run.stop()


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


def _assert_read_only(new: list[tuple[str, str, str]], demo: Demo) -> None:
    assert {name for name, _, _ in new} == set(demo.logs()), f"not every engine was probed: {new}"
    bad = [r for r in new if r[1] != "GET" or r[2] not in ENGINE_READ_ONLY]
    assert not bad, f"non read-only calls to the demo's engines: {bad}"


def test_attach_on_the_demo_is_read_only_and_keeps_the_key_out(demo: Demo, tmp_path: Path) -> None:
    """RO10 + SE6: a default `attach` on the demo's Ray cluster sends its engines only the
    read-only GETs; the API key (on the engines' and driver's command lines and in the Job API's
    entrypoint) appears nowhere in the bundle, its tarball or the report."""
    out = tmp_path / "b"
    url = demo.run.head.dashboard_url
    result, new = _doctor_requests(demo, "attach", url, "--out", str(out), "-f", "json")
    _assert_read_only(new, demo)
    assert result.verdict()["status"] == "hung"
    blobs = [f.read_bytes() for f in out.rglob("*") if f.is_file()]
    with tarfile.open(f"{out}.tar.gz", "r:gz") as tar:
        blobs += [fh.read() for m in tar.getmembers() if (fh := tar.extractfile(m)) is not None]
    blobs += [result.stdout.encode(), result.stderr.encode()]
    assert not [b for b in blobs if DEMO_KEY.encode() in b], "the demo's API key leaked"
    assert any(b"--sglang-api-key" in b for b in blobs), "the entrypoint was not in the bundle"


def test_check_on_the_demo_is_read_only(demo: Demo, tmp_path: Path) -> None:
    """RO10: a default `check` (the cron watchdog) too."""
    url = demo.run.head.dashboard_url
    state = str(tmp_path / "state.json")
    _, new = _doctor_requests(demo, "check", url, "--state-file", state, "--json")
    _assert_read_only(new, demo)
