"""Right culprits with the right explanation (issue 21 item 5), on recorded demo bundles
(provenance in tests/fixtures/README.md):

- `demo2/engine_paused_by_update` (AReaL#1160 shape, recorded with the stand-in's HTTP middleware
  metrics): engine 1's generation gate is closed by a pause that no HTTP call made, and every
  `/pause_generation` the engine answered was followed by a `/continue_generation` (2 and 2). Its
  `/generate` requests in flight at the HTTP layer outnumber those in its scheduler (4 to 0). That
  gap alone does not show a pause: the engine is "held", named for what the evidence shows, never
  "paused (a pause_generation that no continue_generation followed)".
- `demo/checkpoint_writer_deadlock`: train rank 0 forks an asynchronous checkpoint writer
  (multiprocessing, fork) that inherits a lock held by another thread and waits on it for good;
  the child keeps the rank's Ray process title. It is rank 0's child, not "train rank 2" of a
  two-rank job, and rank 0 is the one culprit, with the child named as where it waits.
"""

from __future__ import annotations

from pathlib import Path

from slime_hangdoctor.analysis.readers.sglang_http import EngineState, read_engines
from slime_hangdoctor.analysis.world import build_world
from slime_hangdoctor.pipeline import analyse_bundle
from slime_hangdoctor.verdict import Role, Stage, Status
from tests.fixtures import transforms as tf
from tests.unit.demo_bundles import unpacked

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "analysis"
HELD = FIXTURES / "demo2" / "engine_paused_by_update.tar.gz"
FORKED = FIXTURES / "demo" / "checkpoint_writer_deadlock.tar.gz"
PAUSED_WORDS = "a pause_generation that no continue_generation followed"


# --------------------------------------------------------------------------- held, not paused


def test_requests_held_before_the_scheduler_without_pause_evidence_are_not_called_paused() -> None:
    a = analyse_bundle(HELD)
    engines = read_engines(build_world(a.snapshot, a.topology))
    held = [e for e in engines if e.state is EngineState.HELD]
    assert len(held) == 1 and len(engines) == 2, [(e.url, e.state) for e in engines]
    assert not any(e.state is EngineState.PAUSED for e in engines)
    (e,) = held
    assert e.evidence[0] == (
        "4 requests held between the HTTP layer and the scheduler: not paused by the evidence "
        "(2 /pause_generation, 2 /continue_generation answered); a tokenizer worker that never "
        "forwards them, the weight-update lock, or a request never reaped"
    )
    v = a.diagnosis.verdict
    assert (v.status, v.stage) == (Status.HUNG, Stage.ROLLOUT_DISPATCH), v.summary
    (culprit,) = v.culprits
    assert culprit.role is Role.SGLANG_ENGINE and culprit.engine_url == e.url
    assert PAUSED_WORDS not in v.summary and PAUSED_WORDS not in culprit.why
    assert "not paused by the evidence" in culprit.why
    rules = [f.rule for f in v.findings]
    assert "engine-held" in rules and "engine-paused" not in rules
    assert not any(PAUSED_WORDS in x for f in v.findings for x in (f.message, *f.evidence))


# --------------------------------------------------------------------------- forked children


def test_a_process_forked_by_a_train_rank_is_its_child_not_a_new_rank() -> None:
    topo = analyse_bundle(FORKED).topology
    trainers = [m for m in topo.members if m.role is Role.TRAIN_RANK]
    ranks = sorted((m.rank, m.pid) for m in trainers if m.kind == "actor")
    assert [r for r, _ in ranks] == [0, 1]
    (child,) = [m for m in trainers if m.kind == "child"]
    rank0 = dict(ranks)[0]
    assert (child.rank, child.parent_pid) == (0, rank0)
    assert child.title == "ray::MegatronTrainRayActor.save_model"  # the rank's own title
    assert child.label == f"train rank 0? child (pid {child.pid})"
    assert {m.rank for m in trainers} == {0, 1}


def test_a_stuck_child_makes_its_rank_the_culprit_and_is_named_where_it_waits() -> None:
    a = analyse_bundle(FORKED)
    d = a.diagnosis
    v = d.verdict
    (child,) = [m for m in a.topology.members if m.kind == "child"]
    assert (v.status, v.stage) == (Status.HUNG, Stage.CHECKPOINT), v.summary
    (culprit,) = v.culprits
    assert (culprit.role, culprit.rank, culprit.pid) == (Role.TRAIN_RANK, 0, child.parent_pid)
    assert f"its child train rank 0 child (pid {child.pid}) is " in culprit.why
    assert "_write_shard_locked" in culprit.why  # where the child waits: the inherited lock
    assert "train rank 2" not in v.summary
    labels = {r.label: r for r in d.rows if r.role is Role.TRAIN_RANK}
    assert set(labels) == {"train rank 0", "train rank 1", f"train rank 0 child (pid {child.pid})"}
    assert labels["train rank 0"].culprit and not labels["train rank 1"].culprit
    stall = next(f for f in v.findings if f.rule == "checkpoint-stall")
    assert "while 1 rank(s) are elsewhere" in stall.message  # the child is not a rank


def test_a_rank_that_ends_the_ray_get_chain_names_the_child_it_waits_for(tmp_path: Path) -> None:
    """Without rank 1's stacks (py-spy missed it: `transforms.bundle_without_targets`) no peer is
    seen in a collective, so the odd-one-out finder names no one and the ray.get chain's end
    decides: rank 0, waiting for its forked writer. The child is named there too, where it waits
    (a live run under load reached this path and said only "waiting for a child process")."""
    src = unpacked("checkpoint_writer_deadlock", tmp_path / "src")
    cut = tf.bundle_without_targets(src, tmp_path / "cut", "pyspy", ("pid28344",))
    a = analyse_bundle(cut)
    v = a.diagnosis.verdict
    (child,) = [m for m in a.topology.members if m.kind == "child"]
    (culprit,) = v.culprits
    assert (culprit.role, culprit.rank, culprit.pid) == (Role.TRAIN_RANK, 0, child.parent_pid)
    assert culprit.why.startswith("stacks: train rank 0 is where the chain of ray.get waits ends")
    assert f"its child train rank 0 child (pid {child.pid}) is " in culprit.why
    assert "_write_shard_locked" in culprit.why
