"""The SGLang paths the doctor asks and names are the ones real SGLang releases serve (issue 35
item 2), held against the route tables recorded from the 0.5.15.post1 and 0.5.23 wheels
(tests/fixtures/layouts/sglang-routes.json, scripts/extract_sglang_routes.py; provenance in
tests/fixtures/layouts/README.md).

- Every probe of `ENGINE_ENDPOINTS` reaches, on each release, a path it serves (the collector asks
  the paths newest first and goes on only after a 404), or its 404 is itself the answer
  (`status_answers`, as `/ready` before 0.5.20): a path a release removed (`/get_load`,
  `/get_weight_version`, `/weight_version` are gone from 0.5.23) is never the doctor's blind spot.
- Every control call of the engine call table (`CALL_STAGES`) is a route of a release, with the
  method slime sends it; the few that only a patched SGLang serves are listed below, each with the
  patch that adds it, and the list cannot go stale (a listed path that a release serves fails)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest

from slime_hangdoctor.analysis.readers.sglang_http import CALL_STAGES, call_request
from slime_hangdoctor.parsers.sglang import ENGINE_ENDPOINTS, HttpEndpoint

ROUTES = Path(__file__).resolve().parents[1] / "fixtures" / "layouts" / "sglang-routes.json"

# Control calls no stock release serves, and the SGLang that does.
PATCHED = {
    # slime's SGLang patches (THUDM/slime 624b824 docker/Dockerfile:140 applies them):
    # docker/patch/latest/sglang.patch:352, docker/patch/latest/sglang-pull_weights.patch:17
    "/post_process_weights": "slime's sglang.patch",
    "/pull_weights": "slime's sglang-pull_weights.patch",
    # miles's SGLang branch (radixark/miles 31f1ca961 docker/Dockerfile:19 `sglang-miles`), called
    # at miles sglang_engine.py:440
    "/load_lora_adapter_from_distributed": "miles's sglang-miles branch",
}


@cache
def releases() -> dict[str, dict[str, dict[str, object]]]:
    doc = json.loads(ROUTES.read_text())
    return {version: entry["routes"] for version, entry in doc.items()}


def _serves(version: str, path: str, method: str = "GET") -> bool:
    route = releases()[version].get(path)
    return route is not None and method in route["methods"]  # type: ignore[operator]


def test_the_recorded_route_tables_are_the_releases() -> None:
    """Guard on the fixture: what changed between the two releases, as issue 35 read it."""
    assert set(releases()) == {"0.5.15.post1", "0.5.23"}
    for gone in ("/get_load", "/get_weight_version", "/weight_version"):
        assert _serves("0.5.15.post1", gone) and not _serves("0.5.23", gone), gone
    for new in ("/begin_weight_update", "/end_weight_update"):
        assert _serves("0.5.23", new, "POST") and not _serves("0.5.15.post1", new, "POST"), new
    assert _serves("0.5.23", "/ready") and not _serves("0.5.15.post1", "/ready")


@pytest.mark.parametrize("version", ["0.5.15.post1", "0.5.23"])
@pytest.mark.parametrize("endpoint", ENGINE_ENDPOINTS, ids=lambda e: e.paths[0])
def test_every_engine_probe_gets_an_answer_on_every_release(
    endpoint: HttpEndpoint, version: str
) -> None:
    served = [p for p in endpoint.paths if _serves(version, p)]
    assert served or 404 in endpoint.status_answers, (
        f"{version} serves none of {endpoint.paths}: its last 404 would be a failed probe"
    )


def test_a_path_a_release_removed_is_asked_only_after_one_it_serves() -> None:
    for endpoint in ENGINE_ENDPOINTS:
        for version in releases():
            served = [p for p in endpoint.paths if _serves(version, p)]
            if not served:
                continue
            first = endpoint.paths.index(served[0])
            # the collector stops at the first path the release serves: the paths before it
            # answer 404 and the next one is tried; none after it is asked
            assert all(not _serves(version, p) for p in endpoint.paths[:first])


@pytest.mark.parametrize("path", sorted(CALL_STAGES))
def test_every_engine_call_is_a_route_with_the_method_slime_sends(path: str) -> None:
    method = call_request(path).split(" ", 1)[0]
    stock = [v for v in releases() if _serves(v, path, method)]
    if path in PATCHED:
        assert not any(path in routes for routes in releases().values()), (
            f"{path} is a stock route now: drop it from PATCHED"
        )
    else:
        assert stock, f"no recorded SGLang release serves {method} {path}"
