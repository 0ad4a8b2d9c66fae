"""Read-only by default, proven: every request the SGLang stand-in receives is logged
(`--request-log`), the router and Ray dashboard stand-ins record theirs, the stand-in rank logs
every byte written to its flight-recorder pipe, and the stand-in py-spy logs its argv before
running the real py-spy. A default `attach`, `collect`, `check` or `watch` must send nothing but
the read-only GETs; each opt-in flag adds exactly what it says.

Cases RO1-RO9 of docs/reliability.md (RO10, the real demo job, is in test_readonly_demo.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.integration.sglang_standin_harness import Standin, start_standin
from tests.reliability.harness import (
    COMMON,
    ROOT,
    CliRun,
    HttpStub,
    Rank,
    assert_clean,
    dashboard_routes,
    http_stub,
    pyspy_env,
    real_pyspy,
    run_cli,
    start_rank,
    stopped,
)

pytestmark = pytest.mark.timeout(180)

# The only calls a default run may make: GETs of these paths (newer name, then older name).
ENGINE_READ_ONLY = frozenset(
    {"/model_info", "/get_model_info", "/server_info", "/get_server_info", "/v1/loads"}
    | {"/get_load", "/metrics", "/ready", "/ping"}
)
ROUTER_READ_ONLY = frozenset({"/workers", "/list_workers"})
REAL_DUMP = (
    ROOT / "tests/fixtures/real/gpu-2xh200-nccl-broadcast-hang/run3_hang.fr.fr_hang_rank_0.pkl"
)
WORKERS = json.dumps({"workers": [], "total": 0, "stats": {}}).encode()


@dataclass
class Job:
    """The peers a run may touch, each recording what it was sent."""

    engine: Standin
    router: HttpStub
    rank: Rank
    pyspy_log: Path
    work: Path

    def reset(self) -> None:
        self.engine.request_log.unlink(missing_ok=True)
        self.router.seen.clear()
        Path(str(self.rank.ready) + ".pokes").unlink(missing_ok=True)
        self.pyspy_log.unlink(missing_ok=True)

    def engine_calls(self) -> list[tuple[str, str]]:
        return [(r["method"], r["path"]) for r in self.engine.logged()]

    def pyspy_argvs(self) -> list[list[str]]:
        if not self.pyspy_log.exists():
            return []
        return [json.loads(line)["argv"] for line in self.pyspy_log.read_text().splitlines()]

    def env(self) -> dict[str, str]:
        return pyspy_env("log", HD_PYSPY_LOG=str(self.pyspy_log))


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Job]:
    if real_pyspy() is None:
        pytest.skip("needs py-spy")
    work = tmp_path_factory.mktemp("readonly")
    engine = start_standin(work)
    fr = {
        "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": str(work / "pipe_"),
        "TORCH_FR_DUMP_TEMP_FILE": str(work / "dump_"),
        "RANK": "0",
    }
    args = ("--fr-pipe", str(work / "pipe_"), "--fr-dump", str(work / "dump_"))
    try:
        dump = ("--fr-mode", "dump", "--fr-dump-from", str(REAL_DUMP))
        rank = start_rank(work, *args, *dump, env=fr)
        try:
            with http_stub({"/workers": (200, WORKERS, "application/json", 0.0)}) as router:
                yield Job(engine, router, rank, work / "pyspy-argv.jsonl", work)
        finally:
            rank.stop()
    finally:
        engine.stop()


def run(job: Job, command: str, *extra: str) -> CliRun:
    job.reset()
    args: tuple[str, ...] = (
        command,
        "--local",
        "--sglang-url",
        job.engine.url,
        "--window",
        "0.3",
        "--timeout",
        "10",  # time is not what this module tests: let every probe of both samples run
        *extra,
    )
    if command in ("attach", "collect"):
        args += ("--router-url", job.router.url)
    if command in ("check", "watch"):
        args += ("--state-file", str(job.work / f"state-{command}.json"))
    result = run_cli(*args, env=job.env())
    assert_clean(result, bound_s=60.0)
    return result


def assert_read_only(job: Job, *, router: bool) -> None:
    calls = job.engine_calls()
    assert calls, "the engine was not probed at all (the proof would be empty)"
    bad = [c for c in calls if c[0] != "GET" or c[1] not in ENGINE_READ_ONLY]
    assert not bad, f"non read-only engine calls: {bad}"
    assert sum(1 for c in calls if c[1] == "/server_info") >= 2, calls  # both samples
    if router:
        seen = [(m, p.partition("?")[0]) for m, p, _ in job.router.seen]
        assert seen and all(m == "GET" and p in ROUTER_READ_ONLY for m, p in seen), seen
    assert job.rank.pokes() == b"", "a default run wrote to a flight-recorder pipe"
    argvs = job.pyspy_argvs()
    mine = [a for a in argvs if str(job.rank.pid) in a]
    assert mine, f"the rank was not dumped: {argvs}"
    assert all("--json" in a and "--native" not in a for a in argvs), argvs
    assert not stopped(job.rank.state()), "a dump left the rank stopped"


# --------------------------------------------------------------------------- RO1-RO4 defaults


def test_attach_default_is_read_only(job: Job) -> None:
    """RO1: `attach` (default flags) sends only the read-only GETs."""
    run(job, "attach", "-f", "json")
    assert_read_only(job, router=True)


def test_collect_default_is_read_only(job: Job, tmp_path: Path) -> None:
    """RO2: `collect` (default flags) sends only the read-only GETs."""
    run(job, "collect", "--bundle", str(tmp_path / "b"))
    assert_read_only(job, router=True)


def test_check_default_is_read_only(job: Job) -> None:
    """RO3: `check` (default flags) sends only the read-only GETs."""
    run(job, "check", "--json")
    assert_read_only(job, router=False)


def test_watch_default_is_read_only(job: Job) -> None:
    """RO4: `watch` (two runs) sends only the read-only GETs."""
    run(job, "watch", "--max-runs", "2", "--interval", "1")
    assert_read_only(job, router=False)
    assert sum(1 for c in job.engine_calls() if c[1] == "/server_info") >= 4  # 2 runs x 2


# --------------------------------------------------------------------------- RO5-RO8 opt-ins


def _extra_calls(job: Job) -> set[tuple[str, str]]:
    return {c for c in job.engine_calls() if c[1] not in ENGINE_READ_ONLY}


def test_health_adds_only_health(job: Job) -> None:
    """RO5: --health adds GET /health and nothing else."""
    run(job, "attach", "-f", "json", "--health")
    assert _extra_calls(job) == {("GET", "/health")}
    assert job.rank.pokes() == b""


def test_health_generate_adds_only_health_generate(job: Job) -> None:
    """RO6: --health-generate adds GET /health_generate and nothing else."""
    run(job, "attach", "-f", "json", "--health-generate")
    assert _extra_calls(job) == {("GET", "/health_generate")}
    assert job.rank.pokes() == b""


def test_flight_recorder_writes_one_byte_per_rank(job: Job) -> None:
    """RO7: --flight-recorder writes one byte to each rank's pipe, once, and nothing else more."""
    run(job, "attach", "-f", "json", "--flight-recorder")
    assert job.rank.pokes() == b"1"
    assert _extra_calls(job) == set()


def test_native_only_when_asked(job: Job) -> None:
    """RO8: --native is passed to py-spy only with --native (the JSON dump otherwise)."""
    run(job, "attach", "-f", "json", "--native")
    argvs = job.pyspy_argvs()
    assert argvs and all("--native" in a and "--json" not in a for a in argvs), argvs
    assert not stopped(job.rank.state()), "a native dump left the rank stopped"
    assert _extra_calls(job) == set()
    assert job.rank.pokes() == b""


# --------------------------------------------------------------------------- RO9 dashboard


def test_dashboard_sees_only_gets(tmp_path: Path) -> None:
    """RO9: against a Ray dashboard (the stand-in replaying real answers) attach only GETs."""
    with http_stub(dashboard_routes()) as dash:
        result = run_cli("attach", dash.url, *COMMON)
        assert_clean(result)
        seen = list(dash.seen)
    assert len(seen) >= 8, seen
    assert all(m == "GET" for m, _, _ in seen), [(m, p) for m, p, _ in seen if m != "GET"]
