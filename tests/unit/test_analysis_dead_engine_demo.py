"""Issue 16 class 2 on a recorded demo bundle (tests/fixtures/analysis/demo/engine_server_killed,
provenance in tests/fixtures/README.md): engine 1's HTTP server was SIGKILLed mid-rollout, its
SGLangEngine actor lives on, and the demo has no router. The engine's URL is known only from the
head of that actor's worker log (`actor_log_head`, read on its node): with it the engine is probed,
refused, DEAD and the culprit; without it (`transforms.bundle_without_sources`, and the probes that
URL led to removed with `bundle_without_targets`) the dead engine is invisible and the verdict
blames another process."""

from __future__ import annotations

from pathlib import Path

from slime_hangdoctor.bundle import open_bundle
from slime_hangdoctor.parsers.log_heads import ACTOR_LOG_HEAD
from slime_hangdoctor.parsers.sglang import SGLANG
from slime_hangdoctor.pipeline import analyse_bundle
from slime_hangdoctor.topology import Topology
from slime_hangdoctor.verdict import Diagnosis, Role, Stage, Status
from tests.fixtures import transforms as tf
from tests.unit.demo_bundles import unpacked

NAME = "engine_server_killed"


def _unpacked(dest: Path) -> Path:
    return unpacked(NAME, dest)


def _read(path: Path) -> tuple[Diagnosis, Topology]:
    analysed = analyse_bundle(path)
    assert analysed.topology is not None
    return analysed.diagnosis, analysed.topology


def _logged(topo: Topology) -> str:
    (engine,) = [e for e in topo.engines if e.source == "actor-log"]
    return engine.url


def test_the_killed_server_is_found_through_its_actors_log_and_blamed(tmp_path: Path) -> None:
    root = _unpacked(tmp_path)
    d, topo = _read(root)
    url = _logged(topo)
    engine = next(e for e in topo.engines if e.url == url)
    assert engine.actor_pid is not None and engine.server_pid is None
    v = d.verdict
    assert (v.status, v.stage) == (Status.HUNG, Stage.ROLLOUT_DISPATCH), v.summary
    top = v.culprits[0]
    assert (top.role, top.engine_url, top.pid) == (Role.SGLANG_ENGINE, url, engine.actor_pid)
    assert {"url": url, "state": "dead"} in v.extra["engines"]  # type: ignore[operator]
    evidence = [e for f in v.findings for e in f.evidence]
    assert any(
        f"{url} is known from the head of the err log of SGLangEngine" in e for e in evidence
    )
    assert any("Uvicorn running on" in e for e in evidence)
    # probed in the very sample whose node task read the head (the first), and again in the second
    with open_bundle(root) as bundle:
        heads = list(bundle.records(ACTOR_LOG_HEAD))
        probed = {
            r.sample for r in bundle.records(SGLANG) if r.meta.get("url") == url
        }
    assert {r.sample for r in heads} == {0} and probed == {0, 1}


def test_without_the_log_head_the_verdict_blames_another_process(tmp_path: Path) -> None:
    """The same bundle as if the log heads had never been read: nothing names engine 1's URL, so
    it is never probed (its probes removed too); the dead engine disappears from the verdict."""
    src = _unpacked(tmp_path / "src")
    url = _logged(_read(src)[1])
    with open_bundle(src) as bundle:
        targets = tuple(
            r.target for r in bundle.records(SGLANG) if r.meta.get("url") == url
        )
    assert targets
    blind = tf.bundle_without_sources(
        src, tmp_path / "no-heads", frozenset({ACTOR_LOG_HEAD})
    )
    blind = tf.bundle_without_targets(blind, tmp_path / "no-probes", SGLANG, targets)
    d, topo = _read(blind)
    assert url not in {e.url for e in topo.engines}
    v = d.verdict
    assert not v.culprits or v.culprits[0].engine_url != url, v.summary
    assert "dead" not in {e["state"] for e in v.extra.get("engines", [])}  # type: ignore[union-attr]
