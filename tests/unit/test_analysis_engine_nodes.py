"""One SGLang engine on two nodes (issue 45 item 2), on the recorded two-node demo bundle.

Provenance: tests/fixtures/analysis/demo_nodes/rollout_tp_rank_stuck.tar.gz (tests/fixtures/README.md):
the demo fault `rollout_tp_rank_stuck` with each engine's two TP ranks on two nodes (SGLang's
`--nnodes 2`, one SGLangEngine actor per node), recorded by the real `attach` on a real two-node
Ray cluster (a head at 192.0.2.2, a raylet at 127.0.0.2). Engine 1 (http://192.0.2.2:27525): its
server 24561 and TP0 24607 on the head, its node-rank-1 launcher 24560 and TP1 24648 on 127.0.0.2,
TP1 still inside its decode forward, TP0 at the batch's result. Engine 0 (http://192.0.2.2:27520):
TP0 24614 on the head, launcher 24555 and TP1 24654 on 127.0.0.2. Variants only by
`transforms.bundle_without_sources`.
"""

from __future__ import annotations

import tarfile
from pathlib import Path

from slime_hangdoctor.bundle import open_bundle
from slime_hangdoctor.load import load_snapshot
from slime_hangdoctor.pipeline import analyse_bundle
from slime_hangdoctor.topology import MemberKind, Topology, build_topology
from slime_hangdoctor.verdict import Role, Stage, Status
from tests.fixtures import transforms as tf

BUNDLE = (
    Path(__file__).resolve().parents[1]
    / "fixtures"
    / "analysis"
    / "demo_nodes"
    / "rollout_tp_rank_stuck.tar.gz"
)
HEAD, NODE2 = "192.0.2.2", "127.0.0.2"
STUCK = "http://192.0.2.2:27525"  # engine 1
IDLE = "http://192.0.2.2:27520"  # engine 0
PIDS = {"stuck TP0": 24607, "stuck TP1": 24648, "stuck launcher": 24560, "idle TP1": 24654}


def _unpacked(dest: Path) -> Path:
    with tarfile.open(BUNDLE) as tar:
        tar.extractall(dest, filter="data")
    return next(p.parent for p in dest.rglob("manifest.json"))


def _topology(bundle: Path) -> Topology:
    with open_bundle(bundle) as b:
        return build_topology(load_snapshot(b))


def _member(t: Topology, pid: int, node: str) -> tuple[MemberKind, str | None]:
    m = t.member(pid, node)
    assert m is not None, pid
    return m.kind, m.engine_url


def test_an_engine_on_two_nodes_is_one_engine() -> None:
    """The node-rank-1 part (TP1 and a launcher serving SGLang's dummy health check) takes the
    URL of the engine whose TP0 serves the store its TP1 connects to; its launcher is no engine."""
    t = _topology(BUNDLE)
    assert {e.url for e in t.engines} == {STUCK, IDLE}
    assert len(t.launchers) == 2 and not set(t.launchers) & {e.url for e in t.engines}
    assert _member(t, PIDS["stuck TP1"], NODE2) == (MemberKind.SCHEDULER, STUCK)
    assert _member(t, PIDS["stuck TP0"], HEAD) == (MemberKind.SCHEDULER, STUCK)
    assert _member(t, PIDS["stuck launcher"], NODE2) == (MemberKind.NODE_LAUNCHER, STUCK)
    assert _member(t, PIDS["idle TP1"], NODE2) == (MemberKind.SCHEDULER, IDLE)


def test_the_rank_behind_in_the_batch_is_named_on_its_node() -> None:
    """TP1 on the second node is still inside its forward while TP0 on the head waits at the
    batch's result: the culprit is that scheduler, on that node, of that engine."""
    v = analyse_bundle(BUNDLE).diagnosis.verdict
    assert (v.status, v.stage) == (Status.HUNG, Stage.ROLLOUT_DISPATCH), v.summary
    top = v.culprits[0]
    assert (top.role, top.engine_url, top.pid, top.node_ip) == (
        Role.SGLANG_ENGINE,
        STUCK,
        PIDS["stuck TP1"],
        NODE2,
    ), v.summary
    assert top.process == "scheduler TP1"
    assert "parts/stacks:_behind_in_the_batch" in top.by
    assert [c.engine_url for c in v.culprits] == [STUCK]


def test_without_the_sockets_the_node_is_no_engine_and_its_rank_is_not_claimed(
    tmp_path: Path,
) -> None:
    """Without the TCP connections nothing ties the second node's ranks to an engine: they stay
    apart (no rank of the engine is named from them), its launchers are still no engine, and the
    engine is named by its own TP0 on the head, as a one-node engine is."""
    bare = tf.bundle_without_sources(
        _unpacked(tmp_path / "src"), tmp_path / "bare", frozenset({"sockets"})
    )
    t = _topology(bare)
    assert {e.url for e in t.engines} == {STUCK, IDLE}
    kind, url = _member(t, PIDS["stuck TP1"], NODE2)
    assert kind is MemberKind.SCHEDULER and url in t.launchers
    v = analyse_bundle(bare).diagnosis.verdict
    assert (v.status, v.stage) == (Status.HUNG, Stage.ROLLOUT_DISPATCH), v.summary
    assert (v.culprits[0].engine_url, v.culprits[0].pid) == (STUCK, PIDS["stuck TP0"])
