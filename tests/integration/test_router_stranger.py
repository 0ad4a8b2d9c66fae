"""A URL a router lists is not the job's engine for that alone (issue 32, point 3).

sgl-router registers any worker that `POST /workers` names and that answers its health check, and
that registration is commonly reachable from the job's network. Here a stranger (an HTTP server
that answers with the SGLang stand-in's recorded pages: tests/fixtures/sglang/, provenance in
tests/fixtures/README.md) registers itself at a REAL sgl-router (sglang-router 0.3.2, the wheel
slime's fork is built from), and its `/metrics` counters rise between the samples (the recorded
busy page, then the recorded page after it). Before the fix the doctor took it for one of the
job's engines: it sent it the API key on every probe, its rising counters turned a hung verdict
into "progressing" (exit 2 -> 0), and the watchdog's counters-only look kept reading it.

Now: an engine is the job's when a process of the job serves it (an engine actor's child on a
node of the cluster), or the job's arguments (slime's `--rollout-external-engine-addrs`) or the
user (`--sglang-url`) name it; what only a router lists is `Topology.listed`: probed without the
API key, reported as listed by the router, never weighed."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import tarfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from slime_hangdoctor.bundle import BundleWriter
from slime_hangdoctor.collect.sglang import probe_engine, probe_router
from slime_hangdoctor.pipeline import analyse_bundle
from slime_hangdoctor.verdict import Status
from slime_hangdoctor.watchdog.look import counter_plan
from tests.fixtures import transforms as tf
from tests.reliability.harness import HttpStub, cli_env, free_port, http_stub, run_cli
from tests.unit.demo_bundles import unpacked

pytestmark = pytest.mark.timeout(240)

SGLANG = Path(__file__).resolve().parents[1] / "fixtures" / "sglang"
API_KEY = "sk-stranger-test-4f2a9c7e1b"
NODE = "192.0.2.2"  # the node of the recorded demo bundles' HTTP records


def _page(name: str, ctype: str) -> tuple[int, bytes, str, float]:
    return (200, (SGLANG / name).read_bytes(), ctype, 0.0)


def _standin_routes() -> dict[str, tuple[int, bytes, str, float]]:
    """The stand-in's recorded answers (what sgl-router reads at registration, and what the
    doctor reads); `/health` answers 200 with no body, as SGLang's does."""
    return {
        "/health": (200, b"", "text/plain", 0.0),
        "/server_info": _page("server_info.json", "application/json"),
        "/get_server_info": _page("server_info.json", "application/json"),
        "/model_info": _page("model_info.json", "application/json"),
        "/get_model_info": _page("model_info.json", "application/json"),
        "/v1/loads": _page("v1_loads_busy.json", "application/json"),
        "/metrics": _page("metrics_busy.txt", "text/plain; version=0.0.4"),
    }


@pytest.fixture(scope="module")
def stranger() -> Iterator[HttpStub]:
    with http_stub(_standin_routes()) as stub:
        yield stub


def _get_json(url: str) -> dict[str, object]:
    with urllib.request.urlopen(url, timeout=2) as resp:  # noqa: S310 - a local test router
        return json.loads(resp.read())  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def router(stranger: HttpStub, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real sgl-router with the stranger registered by `POST /workers` (the attack)."""
    port = free_port()
    log = tmp_path_factory.mktemp("router") / "router.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sglang_router.launch_router", "--host", "127.0.0.1",
             "--port", str(port), "--log-level", "warn"],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                _get_json(f"{url}/workers")
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise AssertionError(f"sgl-router did not start:\n{log.read_text()}") from None
                time.sleep(0.3)
        body = json.dumps({"url": stranger.url}).encode()
        req = urllib.request.Request(
            f"{url}/workers", body, {"Content-Type": "application/json"}, method="POST"
        )
        with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310
            assert resp.status == 202
        while stranger.url not in json.dumps(_get_json(f"{url}/workers")):
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _stranger_probes(stranger: HttpStub, router: str, dest: Path, marked: bool) -> Path:
    """A bundle of what the product's own collectors read, at both samples, of the real router
    (its `/workers` lists the stranger) and of the stranger (its counters rise: the stand-in's
    recorded busy page, then the page after it). `marked`: its records say it is only listed by
    the router, as the collector writes them now; unmarked, as every engine was probed before
    the fix (a bundle an older doctor wrote)."""
    routes = stranger.handler.routes
    writer = BundleWriter(dest, command="test")
    mark = {"listed_by_router": True} if marked else {}
    for sample, page in ((0, "metrics_busy.txt"), (1, "metrics_after.txt")):
        routes["/metrics"] = _page(page, "text/plain; version=0.0.4")
        probe_router(writer, router, node_ip=NODE, sample=sample, timeout=2.0)
        probe_engine(writer, stranger.url, node_ip=NODE, sample=sample, timeout=2.0, **mark)
    writer.finish()
    return dest


def _recorded_with_stranger(
    name: str, stranger: HttpStub, router: str, tmp_path: Path, marked: bool = True
) -> Path:
    bundle = unpacked(name, tmp_path / "recorded")
    probes = _stranger_probes(stranger, router, tmp_path / "probes", marked)
    return tf.bundle_with_probes_of(bundle, probes)


@pytest.mark.parametrize("marked", [False, True], ids=["older-bundle", "marked"])
def test_a_stranger_the_router_lists_never_makes_a_hung_job_progressing(
    stranger: HttpStub, router: str, tmp_path: Path, marked: bool
) -> None:
    """The recorded `rollout_engine_stuck` hang (engine 1's scheduler stuck in forward_decode)
    plus a stranger whose counters rise, listed by a real router: still hung, exit 2, the same
    culprit; the stranger is named as listed by the router, outside the verdict (whether or not
    the collector marked its records: the rule is the analysis's own)."""
    plain = analyse_bundle(unpacked("rollout_engine_stuck", tmp_path / "plain")).diagnosis.verdict
    bundle = _recorded_with_stranger("rollout_engine_stuck", stranger, router, tmp_path, marked)
    looked = analyse_bundle(bundle)
    verdict = looked.diagnosis.verdict
    assert plain.status is Status.HUNG
    assert verdict.status is Status.HUNG and int(verdict.exit_code) == 2, verdict.summary
    assert verdict.stage == plain.stage
    assert [c.engine_url for c in verdict.culprits] == [c.engine_url for c in plain.culprits]
    assert looked.topology is not None
    assert stranger.url not in {e.url for e in looked.topology.engines}
    assert stranger.url in {e.url for e in looked.topology.listed}
    found = [f for f in verdict.findings if f.rule == "router-lists-unknown-engine"]
    assert len(found) == 1 and stranger.url in found[0].message, verdict.findings
    assert any("counters rose" in e for e in found[0].evidence), found[0].evidence
    if marked:  # what it did not answer is no blind spot of the job
        assert not any(stranger.url in b for b in verdict.blind_spots), verdict.blind_spots


def test_a_stranger_never_enters_the_watchdogs_counter_plan(
    stranger: HttpStub, router: str, tmp_path: Path
) -> None:
    """The recorded healthy job (`none`, progressing) plus the stranger: the counters-only look's
    plan reads the job's engines whose counters rose, never the stranger."""
    bundle = _recorded_with_stranger("none", stranger, router, tmp_path)
    looked = analyse_bundle(bundle)
    assert looked.diagnosis.verdict.status is Status.PROGRESSING
    assert looked.topology is not None
    live = dataclasses.replace(looked, work_moved=True, node_ip=NODE)
    plan = counter_plan(live, "t", 1000.0)
    assert plan is not None and plan.engines, "the job's own engines rose"
    assert stranger.url not in plan.engines
    assert set(plan.engines) <= {e.url for e in looked.topology.engines}


def test_the_api_key_never_reaches_a_stranger_the_router_lists(
    stranger: HttpStub, router: str, tmp_path: Path
) -> None:
    """`collect --router-url ROUTER --sglang-url ENGINE --api-key K`: the engine the user names
    gets the key; the stranger the router lists is probed without it, its records say it is
    listed by the router, and the verdict names it."""
    with http_stub(_standin_routes()) as engine:
        before = len(stranger.seen)
        run = run_cli(
            "attach", "--local", "--router-url", router, "--sglang-url", engine.url,
            "--api-key", API_KEY, "--bundle", str(tmp_path / "b"), "-f", "json",
            "--window", "0.3", "--timeout", "8", env=cli_env(), hard_limit_s=90,
        )  # fmt: skip
        engine_saw = list(engine.seen)
    asked = stranger.seen[before:]
    assert run.rc in (0, 1, 2, 3), run.describe()
    assert asked, "the doctor never probed the stranger"
    for method, path, headers in asked:
        assert "authorization" not in {k.lower() for k in headers}, (method, path)
    given = [{k.lower(): v for k, v in h.items()}.get("authorization") for _, _, h in engine_saw]
    assert f"Bearer {API_KEY}" in given, engine_saw
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    mine = [r for r in manifest["probes"] if (r.get("meta") or {}).get("url") == stranger.url]
    assert mine and all(r["meta"].get("listed_by_router") is True for r in mine)
    rules = {f["rule"] for f in run.verdict()["findings"]}
    assert "router-lists-unknown-engine" in rules, run.describe()


def test_servers_gone_beside_as_many_bare_engine_actors_stay_the_jobs(tmp_path: Path) -> None:
    """The other side of the rule: engines whose servers are gone listen nowhere, so the router's
    list is what names them. The recorded job behind the real router (`router/idle_behind_router`)
    with both engines' servers and their children reaped (`transforms.bundle_with_processes_reaped`):
    two engine actors without a server and two URLs only the router lists, on one node. No
    one-to-one pairing is known, yet they are the job's (`Engine.lost_server`), not strangers."""
    from tests.unit.test_golden_verdicts import recorded_bundles

    recorded = recorded_bundles()["router-idle_behind_router"]
    src = tmp_path / "src"
    with tarfile.open(recorded) as tar:
        tar.extractall(src, filter="data")
    (root,) = [p.parent for p in src.rglob("manifest.json")]
    before = analyse_bundle(root).topology
    assert before is not None
    urls = {e.url for e in before.engines}
    servers = frozenset(
        m.pid for m in before.members if m.kind in ("http_server", "scheduler", "detokenizer")
    )
    assert len(urls) == 2 and servers
    reaped = tf.bundle_with_processes_reaped(root, tmp_path / "reaped", servers)
    after = analyse_bundle(reaped).topology
    assert after is not None
    assert {e.url for e in after.engines} >= urls and not after.listed
    assert all(e.lost_server for e in after.engines if e.url in urls)
