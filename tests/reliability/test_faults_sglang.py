"""Fault injection, SGLang engines and routers: the real CLI (`attach --local --sglang-url ...`)
against peers on 127.0.0.1 that misbehave at the socket level. Each case ends within --timeout
+ 1 s, with no traceback, a verdict that names the failure, and the rest of the evidence kept.

Cases SG1-SG12 of docs/reliability.md."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.sglang_standin_harness import Standin, start_standin
from tests.reliability.harness import (
    COMMON,
    CliRun,
    answer_with,
    assert_clean,
    assert_other_evidence,
    byte_by_byte,
    engine_states,
    find_blind,
    free_port,
    http_stub,
    huge_body,
    never_answer,
    probes,
    raw_server,
    run_cli,
    truncated_body,
    verdict_says,
)

pytestmark = pytest.mark.timeout(120)

KEY = "sk-reliability-0123456789abcdef"
ENGINE_PATHS = ("/model_info", "/server_info", "/v1/loads", "/metrics", "/ready", "/ping")
# Not yet in the verdict: load.py makes no blind spot of a failed engine/router probe (only of an
# answer it cannot parse), and the analysis reads such an engine as "unknown" without saying why.


def attach(url: str, out: Path, *extra: str) -> tuple[CliRun, Path]:
    run = run_cli("attach", "--local", "--sglang-url", url, "--bundle", str(out), *COMMON, *extra)
    assert_clean(run)
    return run, out


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standin]:
    """The SGLang stand-in started with --api-key (as `--sglang-api-key` makes slime start it)."""
    standin = start_standin(tmp_path_factory.mktemp("keyed"), "--api-key", KEY)
    try:
        yield standin
    finally:
        standin.stop()


# --------------------------------------------------------------------------- SG1, SG2: silence


def test_engine_that_never_answers(tmp_path: Path) -> None:
    """SG1: accepts, reads the request, never answers: every call times out, the deadline holds."""
    with raw_server(never_answer) as s:
        run, out = attach(s.url, tmp_path / "b")
    verdict_says(run, f"GET {s.url}/model_info: no answer (timed out")
    recs = probes(out, "sglang", f"_{s.port}_")
    asked = [r for r in recs if not r["meta"].get("not_sent")]
    assert asked and all(r["outcome"] == "timed_out" for r in asked), recs
    # nothing answered in time: /server_info (one timeout poisons it on 0.5.15) is not sent
    assert {r["meta"]["path"] for r in recs if r["meta"].get("not_sent")} == {"/server_info"}
    assert_other_evidence(out)


def test_engine_that_answers_byte_by_byte(tmp_path: Path) -> None:
    """SG2: a valid answer trickling one byte every 0.2 s: each recv() succeeds, so only a
    whole-request budget (not a socket timeout) ends it."""
    with raw_server(byte_by_byte(0.2)) as s:
        run, out = attach(s.url, tmp_path / "b")
    verdict_says(run, f"GET {s.url}/model_info: no answer (timed out")
    recs = probes(out, "sglang", f"_{s.port}_")
    asked = [r for r in recs if not r["meta"].get("not_sent")]
    assert asked and all(r["outcome"] == "timed_out" for r in asked), recs
    # nothing answered in time: /server_info (one timeout poisons it on 0.5.15) is not sent
    assert {r["meta"]["path"] for r in recs if r["meta"].get("not_sent")} == {"/server_info"}
    assert_other_evidence(out)


# --------------------------------------------------------------------------- SG3-SG5: bad bodies


@pytest.mark.parametrize(
    ("case", "body", "ctype", "why"),
    [
        ("garbage", b"\x00\x01\x02garbage{{{", "application/json", "not JSON"),
        (
            "html",
            b"<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>",
            "text/html",
            "not JSON",
        ),
        ("non-utf8", b'{"model_path": "\xff\xfe\xfa"}', "application/json", "not UTF-8"),
    ],
)
def test_engine_with_unreadable_bodies(
    tmp_path: Path, case: str, body: bytes, ctype: str, why: str
) -> None:
    """SG3 garbage, SG4 an HTML error page, SG5 non-UTF-8 bytes: 200 answers that are not SGLang's
    become one named blind spot per path; the bytes are kept verbatim for a later parser."""
    with raw_server(answer_with(200, body, ctype)) as s:
        run, out = attach(s.url, tmp_path / "b")
    for path in ("/model_info", "/server_info", "/v1/loads"):
        find_blind(run, f"sglang {s.url}{path}: could not parse", why)
    find_blind(run, f"sglang {s.url}/metrics: could not parse", "not Prometheus text")
    recs = probes(out, "sglang", f"_{s.port}_model_info")
    assert recs and all((out / r["artifact"]).read_bytes() == body for r in recs)
    assert_other_evidence(out)


# --------------------------------------------------------------------------- SG6, SG7: cut / huge

Case = tuple[CliRun, Path, str]  # the run, its bundle, the engine URL


@pytest.fixture(scope="module")
def truncated(tmp_path_factory: pytest.TempPathFactory) -> Case:
    body = b'{"model_path": "demo/model", "is_generation": true, "weight_version": "7"}'
    with raw_server(truncated_body(body, 20)) as s:
        run, out = attach(s.url, tmp_path_factory.mktemp("truncated") / "b")
    return run, out, s.url


@pytest.fixture(scope="module")
def huge(tmp_path_factory: pytest.TempPathFactory) -> Case:
    with raw_server(huge_body(100 * 2**20)) as s:
        run, out = attach(s.url, tmp_path_factory.mktemp("huge") / "b")
    return run, out, s.url


def _port(url: str) -> str:
    return url.rsplit(":", 1)[1]


def test_engine_truncated_body_is_recorded(truncated: Case) -> None:
    """SG6: the answer announces more bytes than it sends, then closes: each probe fails with the
    transport's reason (IncompleteRead) in the bundle."""
    _, out, url = truncated
    recs = probes(out, "sglang", f"_{_port(url)}_")
    assert len(recs) == 2 * len(ENGINE_PATHS)
    assert all(r["outcome"] == "failed" and "IncompleteRead" in r["reason"] for r in recs), recs
    assert_other_evidence(out)


def test_engine_truncated_body_is_a_blind_spot(truncated: Case) -> None:
    """SG6 (verdict): the verdict names the broken answers."""
    run, _, url = truncated
    find_blind(run, f"{url}/server_info", "IncompleteRead")


def test_engine_huge_body_is_not_kept(huge: Case) -> None:
    """SG7: a 100 MB answer to every path: read up to the 4 MiB cap, then dropped (not stored, not
    redacted, not parsed), so memory and time stay bounded and the bundle stays small."""
    run, out, url = huge
    recs = probes(out, "sglang", f"_{_port(url)}_")
    assert recs and all(r["outcome"] == "failed" for r in recs), recs
    assert all("larger than 4 MiB: not kept" in r["reason"] for r in recs), recs
    assert all(r["artifact"] is None for r in recs)
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    assert size < 2 * 2**20, f"bundle is {size} bytes"
    assert max(len(b) for b in run.blind_spots()) < 2000
    assert_other_evidence(out)


def test_engine_huge_body_is_a_blind_spot(huge: Case) -> None:
    """SG7 (verdict): the verdict names the oversized answers."""
    run, _, url = huge
    find_blind(run, f"{url}/server_info", "not kept")


# --------------------------------------------------------------------------- SG8-SG10: API keys


def _paths(out: Path, port: int) -> dict[str, set[str]]:
    got: dict[str, set[str]] = {}
    for r in probes(out, "sglang", f"_{port}_"):
        got.setdefault(r["meta"]["path"], set()).add(r["outcome"])
    return got


@pytest.fixture(scope="module")
def nokey(keyed: Standin, tmp_path_factory: pytest.TempPathFactory) -> tuple[CliRun, Path]:
    return attach(keyed.url, tmp_path_factory.mktemp("nokey") / "b")


def test_api_key_missing_is_denied(nokey: tuple[CliRun, Path], keyed: Standin) -> None:
    """SG8: an engine started with --api-key, no --api-key given: the key-protected paths are
    `denied` with the hint to pass --api-key; /metrics (open, as in SGLang) is still read."""
    _, out = nokey
    got = _paths(out, keyed.port)
    assert got["/model_info"] == got["/server_info"] == got["/v1/loads"] == {"denied"}, got
    assert got["/metrics"] == {"ok"}, got
    rec = probes(out, "sglang", f"_{keyed.port}_server_info")[0]
    assert "HTTP 401" in rec["reason"] and "--api-key" in rec["reason"]
    assert_other_evidence(out)


def test_api_key_missing_is_a_blind_spot(nokey: tuple[CliRun, Path], keyed: Standin) -> None:
    """SG8 (verdict): the verdict says the engine wants an API key."""
    find_blind(nokey[0], keyed.url, "--api-key")


def test_api_key_wrong_is_denied(tmp_path: Path, keyed: Standin) -> None:
    """SG9: a wrong --api-key is refused the same way (and is never written anywhere)."""
    _, out = attach(keyed.url, tmp_path / "b", "--api-key", "wrong-key-123456")
    got = _paths(out, keyed.port)
    assert got["/server_info"] == {"denied"}, got
    assert "wrong-key-123456" not in (out / "manifest.json").read_text()


def test_api_key_given_is_accepted(tmp_path: Path, keyed: Standin) -> None:
    """SG10: with the right --api-key every default path answers."""
    run, out = attach(keyed.url, tmp_path / "b", "--api-key", KEY)
    got = _paths(out, keyed.port)
    assert set(got) == set(ENGINE_PATHS) and all(v == {"ok"} for v in got.values()), got
    assert not any("401" in b for b in run.blind_spots())


# --------------------------------------------------------------------------- SG11: router


def test_router_listing_dead_workers(tmp_path: Path) -> None:
    """SG11: a router lists two engines nobody serves, and no process of a job is there: both are
    probed, in the sample whose router answer named them and in the next (a server that is gone
    listens nowhere: issue 16), without the API key; nothing says they are the job's (issue 32: a
    router's list alone does not), so the verdict names them as listed by the router, with the
    refused connection, and weighs neither. (With the job's engine actors beside them on their
    node they are the job's dead engines: tests/integration/test_router_stranger.py,
    tests/unit/test_analysis_dead_engine_demo.py.)"""
    dead = [f"http://127.0.0.1:{free_port()}" for _ in range(2)]
    body = json.dumps(
        {
            "workers": [{"id": str(i), "url": u, "is_healthy": True} for i, u in enumerate(dead)],
            "total": 2,
            "stats": {},
        }
    ).encode()
    with http_stub({"/workers": (200, body, "application/json", 0.0)}) as router:
        run = run_cli(
            "attach", "--local", "--router-url", router.url, "--bundle", str(tmp_path / "b"), *COMMON
        )
    assert_clean(run)
    assert not any(url in engine_states(run) for url in dead), engine_states(run)
    listed = [f for f in run.verdict()["findings"] if f["rule"] == "router-lists-unknown-engine"]
    for url in dead:
        (said,) = [f for f in listed if url in f["message"]]
        assert any("connection refused" in e for e in said["evidence"]), said
    assert {r["outcome"] for r in probes(tmp_path / "b", "router")} == {"ok"}
    for url in dead:
        recs = [r for r in probes(tmp_path / "b", "sglang") if r["meta"]["url"] == url]
        assert {r["sample"] for r in recs} == {0, 1}, (url, recs)
        assert all(r["meta"].get("listed_by_router") is True for r in recs)
    assert_other_evidence(tmp_path / "b")


# --------------------------------------------------------------------------- SG12: refused


def test_engine_port_closed(tmp_path: Path) -> None:
    """SG12: nothing listens on the engine's port: the engine is dead, said at once."""
    url = f"http://127.0.0.1:{free_port()}"
    run, out = attach(url, tmp_path / "b")
    assert engine_states(run).get(url) == "dead", engine_states(run)
    recs = probes(out, "sglang")
    mine = [r for r in recs if r["meta"]["url"] == url]
    assert mine and all(r["outcome"] == "unavailable" for r in mine)
    assert_other_evidence(out)


# --------------------------------------------------------------------------- SG13: huge integer


def test_engine_answering_a_huge_integer(tmp_path: Path) -> None:
    """SG13: an engine port answering one 5000-digit integer (valid JSON, over CPython's int limit):
    blind spots like any other unreadable body, not a crash."""
    with raw_server(answer_with(200, b"9" * 5000)) as s:
        run = run_cli("attach", "--local", "--sglang-url", s.url, *COMMON)
    assert "internal error" not in run.err, run.err
    find_blind(run, f"sglang {s.url}/server_info: could not parse")
