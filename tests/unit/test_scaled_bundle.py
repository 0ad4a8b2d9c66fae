"""A recorded hung job grown to many nodes (tests/fixtures/scaled.py, issue 46 item 1): each node
with 8 train ranks and a TP-8 engine, the recorded fault kept on one rank or one engine of node 0.
The analysis names the same culprit as on the recording. Timings: benchmarks/bench_scaled_analysis.py."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from slime_hangdoctor.analysis.diagnosis import diagnose
from slime_hangdoctor.pipeline import Analysed, analyse_bundle
from slime_hangdoctor.topology import MemberKind, build_topology
from slime_hangdoctor.verdict import Role, Status
from tests.fixtures.scaled import node_ip, scaled_bundle

DEMO = Path(__file__).resolve().parents[1] / "fixtures" / "analysis" / "demo"


def _recorded(name: str, tmp: Path) -> Analysed:
    with tarfile.open(DEMO / f"{name}.tar.gz") as tar:
        tar.extractall(tmp, filter="data")
    (bundle,) = [p.parent for p in tmp.rglob("manifest.json")]
    return analyse_bundle(bundle)


def _templates(a: Analysed) -> tuple[int, int]:
    """A train rank and an engine actor of the recording that the verdict does not blame."""
    blamed = {(c.node_ip, c.pid) for c in a.diagnosis.verdict.culprits}
    assert a.topology is not None
    members = a.topology.members

    def other(role: Role) -> int:
        return min(
            m.pid
            for m in members
            if m.role is role and m.kind is MemberKind.ACTOR and (m.node_ip, m.pid) not in blamed
        )

    return other(Role.TRAIN_RANK), other(Role.SGLANG_ENGINE)


@pytest.mark.parametrize(
    ("name", "nodes"),
    [("train_rank_stuck", 8), ("train_rank_stuck", 32), ("rollout_engine_stuck", 8)],
)
def test_the_scaled_job_names_the_recorded_culprit(name: str, nodes: int, tmp_path: Path) -> None:
    recorded = _recorded(name, tmp_path)
    want = recorded.diagnosis.verdict
    assert want.status is Status.HUNG and want.culprits, want
    rank_pid, engine_pid = _templates(recorded)
    assert recorded.snapshot is not None
    snap = scaled_bundle(recorded.snapshot, nodes, rank_pid=rank_pid, engine_pid=engine_pid)
    topo = build_topology(snap)
    ranks = [m for m in topo.members if m.role is Role.TRAIN_RANK and m.kind is MemberKind.ACTOR]
    assert len(ranks) == 8 * nodes
    assert {e.node_ip for e in topo.engines} >= {node_ip(k) for k in range(1, nodes)}
    schedulers = [p for p in snap.processes_at(0) if "scheduler_TP7" in (p.name or "")]
    assert len(schedulers) == len(topo.engines), schedulers
    got = diagnose(snap, topo).verdict
    assert (got.status, got.stage) == (want.status, want.stage)
    assert [(c.role, c.node_ip, c.pid, c.engine_url) for c in got.culprits[:1]] == [
        (c.role, c.node_ip, c.pid, c.engine_url) for c in want.culprits[:1]
    ]


def test_nodes_that_share_pids_keep_their_ranks_and_the_culprit(tmp_path: Path) -> None:
    """The nodes of a real job reuse the same pids: each of 8 nodes' ranks gets its own number
    (topology.py `_assign_ranks` keys by (node, pid); by pid alone 64 ranks had 10 numbers)."""
    recorded = _recorded("train_rank_stuck", tmp_path)
    assert recorded.snapshot is not None
    rank_pid, engine_pid = _templates(recorded)
    snap = scaled_bundle(
        recorded.snapshot, 8, rank_pid=rank_pid, engine_pid=engine_pid, per_node_pids=True
    )
    pids = [p.pid for p in snap.processes_at(0) if p.node_ip == node_ip(1)]
    assert set(pids) & {p.pid for p in snap.processes_at(0) if p.node_ip == node_ip(2)}
    topo = build_topology(snap)
    ranks = [m for m in topo.members if m.role is Role.TRAIN_RANK and m.kind is MemberKind.ACTOR]
    assert sorted(m.rank if m.rank is not None else -1 for m in ranks) == list(range(64))
    want = recorded.diagnosis.verdict.culprits[0]
    got = diagnose(snap, topo).verdict.culprits[0]
    assert (got.node_ip, got.pid) == (want.node_ip, want.pid)
