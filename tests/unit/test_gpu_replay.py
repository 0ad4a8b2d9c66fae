"""Replay the bundles recorded live on 2x H200 through `slime-hangdoctor analyse` (the real CLI).

The bundles (tests/fixtures/bundles/gpu-h200-*) were written by `attach --out` against the GPU test
programs of tests/gpu/ (provenance in tests/fixtures/bundles/README.md); gpu-h200-runs/<name>.json
holds what the harness knew independently of the doctor: each rank's pid and the GPU NVML listed it
on, and the pid it killed. Each replay must give the verdict the README expects: status, stage, the
culprit's rank, GPU and pid. The `-fr` bundles also hold the ranks' flight-recorder dumps.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from slime_hangdoctor.bundle import open_bundle
from slime_hangdoctor.cli import main
from slime_hangdoctor.load import load_snapshot
from slime_hangdoctor.parsers.flight_recorder import SPEC as FLIGHT_RECORDER

BUNDLES = Path(__file__).resolve().parents[1] / "fixtures" / "bundles"
RUNS = BUNDLES / "gpu-h200-runs"


@dataclass(frozen=True)
class Case:
    name: str  # gpu-h200-<name>[-fr]
    status: str
    stage: str
    culprit_rank: int | None = None
    fr_dumps: int = 2  # flight-recorder dumps in the -fr bundle


CASES = (
    Case("broadcast-hang", "hung", "nccl_broadcast", 1),
    Case("broadcast-64mib", "hung", "weight_sync", 1),
    Case("train-stuck", "hung", "train", 1, fr_dumps=1),
    Case("rank-killed", "hung", "train", 1, fr_dumps=1),
    Case("allreduce-busy", "progressing", "none"),
    Case("matmul-healthy", "progressing", "none"),
)
PARAMS = [
    pytest.param(case, fr, id=f"{case.name}{'-fr' if fr else ''}")
    for case in CASES
    for fr in (False, True)
]


def _analyse(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, object]]:
    rc = main(["analyse", str(path), "--json"])
    out = capsys.readouterr().out
    return rc, json.loads(out)


@pytest.mark.parametrize(("case", "fr"), PARAMS)
def test_replay_gives_the_expected_verdict(
    case: Case, fr: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = BUNDLES / f"gpu-h200-{case.name}{'-fr' if fr else ''}"
    truth = json.loads((RUNS / f"{case.name}.json").read_text())
    rc, v = _analyse(bundle, capsys)
    assert v["status"] == case.status, v["summary"]
    assert v["stage"] == case.stage, v["summary"]
    culprits = v["culprits"]
    assert isinstance(culprits, list)
    if case.culprit_rank is None:
        assert rc == 0
        assert culprits == []
        return
    assert rc in (1, 2)  # hung: CRITICAL, or WARNING while the culprit still burns CPU
    rank = next(r for r in truth["ranks"] if r["rank"] == case.culprit_rank)
    c = culprits[0]
    assert c["role"] == "train_rank"
    assert c["rank"] == case.culprit_rank
    assert c["gpu"] == truth["gpu_of_rank"][str(case.culprit_rank)]
    assert c["pid"] == rank["pid"]
    if truth.get("killed_pid") is not None:
        assert c["pid"] == truth["killed_pid"]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_fr_bundles_hold_the_dumps(case: Case) -> None:
    with open_bundle(BUNDLES / f"gpu-h200-{case.name}-fr") as bundle:
        snapshot = load_snapshot(bundle)
    assert len(snapshot.facts(FLIGHT_RECORDER)) == case.fr_dumps
    assert {f.fact.rank for f in snapshot.facts(FLIGHT_RECORDER)} >= {0}
    with open_bundle(BUNDLES / f"gpu-h200-{case.name}") as bundle:
        assert not load_snapshot(bundle).facts(FLIGHT_RECORDER)
