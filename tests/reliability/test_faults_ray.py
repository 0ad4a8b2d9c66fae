"""Fault injection, the Ray side: a dashboard that is down, answers 500 or is slow, and wrong
address forms. The dashboard is a stand-in on 127.0.0.1 replaying the real Ray 2.60 answers of
the 2x H200 capture (tests/fixtures/real/gpu-2xh200-ray-nccl-hang/hang/dashboard.json).

Cases RA1-RA7 of docs/reliability.md."""

from __future__ import annotations

from pathlib import Path

import pytest

from slime_hangdoctor.errors import RayUnreachable
from tests.reliability.harness import (
    COMMON,
    assert_clean,
    assert_other_evidence,
    dashboard_routes,
    find_blind,
    free_port,
    http_stub,
    probes,
    run_cli,
)

pytestmark = pytest.mark.timeout(120)

STATE = ("actors", "tasks_running", "nodes", "jobs", "node_summary")


def test_dashboard_down_attach() -> None:
    """RA1: nothing listens at the dashboard address: exit 3 (unknown) at once, the verdict says
    which form was tried and why it failed."""
    url = f"http://127.0.0.1:{free_port()}"
    run = run_cli("attach", url, *COMMON)
    assert_clean(run, rcs=(3,))
    spot = find_blind(run, f"no Ray dashboard answered for address '{url}'")
    assert f"{url}: connection refused" in spot
    # how to give the address reaches the user: the unknown verdict's next step
    assert RayUnreachable.help_text in [s["text"] for s in run.verdict()["next_steps"]]


def test_dashboard_down_collect_keeps_the_rest(tmp_path: Path) -> None:
    """RA1 (collect): the bundle is still written with everything this node could give, and
    stderr says the cluster could not be read."""
    url = f"http://127.0.0.1:{free_port()}"
    run = run_cli("collect", url, "--bundle", str(tmp_path / "b"), *COMMON[2:])
    assert_clean(run, rcs=(0,))
    assert "could not read the Ray cluster" in run.err
    assert "connection refused" in run.err
    assert RayUnreachable.help_text.split(": ", 1)[0] in " ".join(run.err.split())
    rec = probes(tmp_path / "b", "ray_dashboard")[0]
    assert rec["outcome"] == "unavailable" and "connection refused" in rec["reason"]
    assert_other_evidence(tmp_path / "b")
    assert (tmp_path / "b.tar.gz").is_file()


def test_dashboard_500_everywhere() -> None:
    """RA2: every path answers 500 (a proxy in front of a dead dashboard): not taken for a
    dashboard; exit 3 with the status in the message."""
    with http_stub({}, default=(500, b"Internal Server Error", "text/plain", 0.0)) as dash:
        run = run_cli("attach", dash.url, *COMMON)
    assert_clean(run, rcs=(3,))
    find_blind(run, f"{dash.url}: HTTP 500: not a Ray dashboard")


def test_dashboard_state_api_500(tmp_path: Path) -> None:
    """RA3: /api/version answers, every state/Job API call answers 500: one blind spot per
    endpoint, the rest of the evidence kept."""
    with http_stub(dashboard_routes(status=500)) as dash:
        run = run_cli("attach", dash.url, "--bundle", str(tmp_path / "b"), *COMMON)
    assert_clean(run)
    for target in STATE:
        find_blind(run, f"ray_dashboard {target}: failed: HTTP 500")
    assert_other_evidence(tmp_path / "b")


def test_dashboard_slow_state_api(tmp_path: Path) -> None:
    """RA4: /api/version answers, every other call takes 10 s: each is cut at the probe timeout
    (all at once, not one after the other), and the run still ends by the deadline."""
    with http_stub(dashboard_routes(delay=10.0)) as dash:
        run = run_cli("attach", dash.url, "--bundle", str(tmp_path / "b"), *COMMON)
    assert_clean(run)
    for target in STATE:
        find_blind(run, f"ray_dashboard {target}: timed_out: timed out after")
    assert_other_evidence(tmp_path / "b")


def test_dashboard_slow_everywhere() -> None:
    """RA5: even /api/version takes 10 s: the address check gives up within its budget."""
    routes = {p: (s, b, c, 10.0) for p, (s, b, c, _) in dashboard_routes().items()}
    with http_stub(routes) as dash:
        run = run_cli("attach", dash.url, *COMMON)
    assert_clean(run, rcs=(3,))
    find_blind(run, f"{dash.url}: timed out")


@pytest.mark.parametrize(
    ("address", "says"),
    [
        ("foo://127.0.0.1:8265", "unknown scheme 'foo'"),
        ("http://127.0.0.1:99999", "has no valid port"),
        ("http://127.0.0.1:abc", "has no valid port"),
        ("127.0.0.1:notaport", "'notaport' is not a port number"),
        ("127.0.0.1:0", "'0' is not a port number"),
        ("[::1]:x", "'x' is not a port number"),
    ],
)
def test_wrong_address_forms(address: str, says: str) -> None:
    """RA6: malformed addresses are refused with the reason (never an internal error), at once."""
    run = run_cli("attach", address, *COMMON)
    assert_clean(run, rcs=(3,))
    find_blind(run, f"address '{address}'", says)


def test_wrong_address_form_collect_message(tmp_path: Path) -> None:
    """RA6 (collect): the same reason on stderr, as a message."""
    run = run_cli("collect", "foo://x", "--bundle", str(tmp_path / "b"), *COMMON[2:])
    assert_clean(run, rcs=(0,))
    assert "unknown scheme 'foo'" in run.err


def test_bad_option_value_is_a_message() -> None:
    """RA7: a bad option value is a usage message with exit 3, not a traceback."""
    run = run_cli("attach", "--local", "--timeout", "soon")
    assert_clean(run, rcs=(3,))
    assert "Invalid value for '--timeout'" in run.err and "--help" in run.err
