"""`router-no-workers` fires on what a router really says (issue 35 item 5). The real sgl-router
0.3.2 started with no worker (tests/fixtures/real/router-no-workers/answers.json, recorded by
capture_router_answers.py beside it) answers `GET /workers` 200 with an empty list, and every
`/generate` 503 `no_available_workers`; the doctor asks the former and never sends the latter, so
the rule reads the empty list, in every sample. The recorded demo `router_worker_removed` (the real
router, every worker removed) shows it; a router that lists its engines does not."""

from __future__ import annotations

import json
from pathlib import Path

from slime_hangdoctor.parsers.sglang import ROUTER_ENDPOINTS, parse_workers
from slime_hangdoctor.pipeline import analyse_bundle

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
ANSWERS = FIXTURES / "real" / "router-no-workers" / "answers.json"


def _rules(bundle: Path) -> list[str]:
    return [f.rule for f in analyse_bundle(bundle).diagnosis.verdict.findings]


def test_the_real_router_with_no_worker_lists_none_and_refuses_generate() -> None:
    doc = json.loads(ANSWERS.read_text())
    assert doc["router"] == "sglang-router 0.3.2"
    answers = doc["answers"]
    workers = answers["GET /workers"]
    assert workers["status"] == 200 and parse_workers(workers["body"].encode()).urls == ()
    assert answers["POST /generate"]["status"] == 503
    assert json.loads(answers["POST /generate"]["body"])["error"]["code"] == "no_available_workers"
    # the collector asks /workers first (it answers, so /list_workers, a 404 here, is not asked)
    assert ROUTER_ENDPOINTS[0].paths[0] == "/workers"


def test_a_router_that_lists_no_worker_is_the_finding() -> None:
    bundle = FIXTURES / "analysis" / "demo" / "router_worker_removed.tar.gz"
    found = analyse_bundle(bundle).diagnosis.verdict.findings
    (rule,) = [f for f in found if f.rule == "router-no-workers"]
    assert any("/workers: 200, no worker, in every sample" in e for e in rule.evidence)


def test_a_router_that_lists_its_engines_is_not() -> None:
    assert "router-no-workers" not in _rules(
        FIXTURES / "analysis" / "router" / "idle_behind_router.tar.gz"
    )
