"""Known causes match their own evidence (issue 45 item 4): a known cause is asserted only where
every piece its table entry needs is shown, worded "similar to <case>" where a piece is not shown,
and not given where one contradicts it; in every case the verdict (status, stage, culprits) is
what the other evidence decided.

Recordings: demo fault `actor_queue_cycle` (slime PR#2331's shape: two PP sources creating
`slime-pp_0` / `slime-pp_1` at once, each engine actor in one `init_weights_update_group` with
the other's call queued; the engines' SGLang logs say which group each joined), varied by
`transforms.bundle_without_sources` (no logs) and `transforms.bundle_with_argv_extended` (the
driver started with `--pipeline-model-parallel-size N`) and `transforms.bundle_with_artefact` (one
engine's log in place of the other's); the stage-shapes' four real Gloo TP
ranks of a colocated tensor update (sglang#17870's shape: three in the barrier, one still in the
update) beside demo `colocate_update_hang`'s train rank, with the recorded driver row of that
bundle given `--sglang-speculative-algorithm` (`transforms.process_with_argv`) or the odd rank
left out (`transforms.stacks_without`'s rule: its stacks not given)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from slime_hangdoctor.analysis.diagnosis import diagnose
from slime_hangdoctor.analysis.known_case import Fit
from slime_hangdoctor.parsers.logs import RAY_LOGS, parse_log_tail
from slime_hangdoctor.topology import Engine
from slime_hangdoctor.verdict import Finding, Role, Severity, Stage, Status, Verdict
from tests.fixtures import transforms as tf
from tests.unit import recorded_shapes as rs
from tests.unit.analysis_builders import NODE, member, running_job, snapshot, topology
from tests.unit.demo_bundles import diagnosed, unpacked
from tests.unit.recorded_stacks import as_obs, demo, recorded_thread, tp_scheduler

PP_RULE, PP_SIMILAR = "known-pp-weight-group-deadlock", "similar-pp-weight-group-deadlock"
IPC_RULE, IPC_SIMILAR = "known-cuda-ipc-colocate-hang", "similar-cuda-ipc-colocate-hang"
CYCLE_DRIVER = 20986  # demo actor_queue_cycle: `python train.py --fault actor_queue_cycle ...`
COLOCATE_DRIVER = 7205  # demo colocate_update_hang: its train.py
URL = "http://10.0.0.1:30000"


def _finding(v: Verdict, rule: str) -> Finding | None:
    return next((f for f in v.findings if f.rule == rule), None)


def _essentials(v: Verdict) -> tuple[object, ...]:
    return (v.status, v.stage, [(c.role, c.pid) for c in v.culprits])


@pytest.fixture(scope="module")
def cycle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return unpacked("actor_queue_cycle", tmp_path_factory.mktemp("cycle"))


# --------------------------------------------------------------------------- slime PR#2331


def test_the_engines_log_says_which_weight_update_group_it_joined(cycle: Path) -> None:
    """SGLang's 'init custom process group: ... group_name=...' line, as the recorded engine's
    log holds it: the group and the engine's rank in it."""
    logs = sorted(cycle.rglob("SGLangEngine-*-err.log"))
    joins = [j for p in logs for j in parse_log_tail(p.read_text()).group_joins]
    assert {(j.group_name, j.rank, j.world_size) for j in joins} == {
        ("slime-pp_0", 1, 3),
        ("slime-pp_1", 2, 3),
    }


def test_the_pp_group_deadlock_is_asserted_on_its_full_evidence(cycle: Path) -> None:
    """As recorded: the frames, the groups `slime-pp_0` and `slime-pp_1` (PP >= 2: slime names
    one per PP rank) and each engine in a different one. With the driver's
    `--pipeline-model-parallel-size 2` the PP size comes from its command line."""
    v = diagnosed(cycle).verdict
    f = _finding(v, PP_RULE)
    assert f is not None and f.severity is Severity.CRITICAL and _finding(v, PP_SIMILAR) is None
    assert "slime-pp_0 as rank 1 of 3" in f.message and "slime-pp_1 as rank 2 of 3" in f.message
    assert "groups slime-pp_0, slime-pp_1 (one per PP rank)" in f.message
    flagged = tf.bundle_with_argv_extended(
        cycle, cycle.parent / "pp2", CYCLE_DRIVER, ("--pipeline-model-parallel-size", "2")
    )
    w = diagnosed(flagged).verdict
    g = _finding(w, PP_RULE)
    assert g is not None and "--pipeline-model-parallel-size 2 on the driver" in g.message
    assert _essentials(w) == _essentials(v)


def test_without_the_engines_logs_it_is_only_similar(cycle: Path) -> None:
    """Without the logs nothing shows the groups' names nor the PP size; Ray's task list still
    shows each engine running one join with another queued: "similar to" slime PR#2331, INFO,
    its cause not asserted; the verdict as with the full evidence."""
    full = diagnosed(cycle).verdict
    bare = tf.bundle_without_sources(cycle, cycle.parent / "nologs", frozenset({RAY_LOGS}))
    v = diagnosed(bare).verdict
    f = _finding(v, PP_SIMILAR)
    assert f is not None and _finding(v, PP_RULE) is None
    assert f.severity is Severity.INFO
    assert f.message.startswith("Similar to THUDM/slime PR#2331, not asserted")
    assert "not shown: PP size >= 2" in f.message and "slime-pp_<k>" in f.message
    assert any("(Ray task list)" in e for e in f.evidence)
    assert not any("Work-around until PR #2331" in s for s in v.step_texts)
    assert (v.status, v.stage) == (Status.HUNG, Stage.WEIGHT_SYNC)
    assert _essentials(v) == _essentials(full)


def test_a_pp_size_of_one_contradicts_it(cycle: Path) -> None:
    """The driver started with `--pipeline-model-parallel-size 1`: the case needs PP > 1, so
    neither the known cause nor "similar to" is given; the verdict stands on its own evidence."""
    full = diagnosed(cycle).verdict
    one = tf.bundle_with_argv_extended(
        cycle, cycle.parent / "pp1", CYCLE_DRIVER, ("--pipeline-model-parallel-size=1",)
    )
    v = diagnosed(one).verdict
    assert _finding(v, PP_RULE) is None and _finding(v, PP_SIMILAR) is None
    assert _essentials(v) == _essentials(full)
    assert "ray_tasks.wait_cycle" in {f.rule for f in v.findings}


def test_engines_that_joined_one_group_contradict_it(cycle: Path) -> None:
    """Engine c3b548ab's log replaced by engine b86db5eb's (`transforms.bundle_with_artefact`: a
    real log of an actor of the same class): both joined `slime-pp_0`, so the engines are not
    split across groups (sglang PR#33934's shape has one group): no PR#2331 finding; the
    verdict still stands on Ray's task list."""
    full = diagnosed(cycle).verdict
    log = (cycle / "raw/ray_logs/local/SGLangEngine-b86db5ebcd54-err.log").read_text()
    one = tf.bundle_with_artefact(
        cycle, cycle.parent / "one", RAY_LOGS, log, "SGLangEngine-c3b548ab180f-err"
    )
    v = diagnosed(one).verdict
    assert _finding(v, PP_RULE) is None and _finding(v, PP_SIMILAR) is None
    assert _essentials(v) == _essentials(full)


# --------------------------------------------------------------------------- sglang#17870


def _colocated(*, draft: str | None, odd: bool = True) -> Verdict:
    """Four recorded Gloo TP schedulers of one engine (rank 3 still in the tensor update; without
    `odd`, not given) and a recorded train rank in the colocated update; the recorded driver row
    of demo colocate_update_hang, started with `--sglang-speculative-algorithm draft` when given."""
    trainer = recorded_thread(demo("colocate_update_hang"), 7665)
    ranks = range(4) if odd else range(3)
    stacks = [as_obs(500 + i, s, tp_scheduler(i)) for i in ranks for s in (0, 1)]
    stacks += [as_obs(300, s, trainer) for s in (0, 1)]
    bundle = rs.bundle("demo/colocate_update_hang")
    row = rs.process(bundle, COLOCATE_DRIVER, as_pid=100, ppid=1)
    if draft is not None:
        row = tf.process_with_argv(row, ("--sglang-speculative-algorithm", draft))
    table = dataclasses.replace(rs.processes(bundle, 0), fact=(row,))
    topo = topology(
        member(Role.DRIVER, 100, "driver"),
        member(Role.TRAIN_RANK, 300, cls="MegatronTrainRayActor", method="update_weights", rank=0),
        *(member(Role.SGLANG_ENGINE, 500 + i, "scheduler", url=URL) for i in range(4)),
        engines=[Engine(URL, NODE)],
    )
    snap = snapshot(stacks=tuple(stacks), processes=(table,), jobs=(running_job(100),))
    return diagnose(snap, topo).verdict


def test_the_colocate_hang_is_asserted_with_a_draft_model_and_an_odd_scheduler() -> None:
    v = _colocated(draft="EAGLE")
    f = _finding(v, IPC_RULE)
    assert f is not None and f.severity is Severity.WARNING
    assert "--sglang-speculative-algorithm EAGLE on the driver" in f.message
    assert "(pid 503) out of 4 schedulers" in f.message
    assert [c.pid for c in v.culprits] == [503] and v.stage is Stage.WEIGHT_SYNC


def test_without_the_draft_model_it_is_only_similar() -> None:
    """No command line shows a draft model (as in vime PR#168's shape and the demo's): similar
    to sglang#17870; the culprit is the odd scheduler either way."""
    v = _colocated(draft=None)
    f = _finding(v, IPC_SIMILAR)
    assert f is not None and _finding(v, IPC_RULE) is None and f.severity is Severity.INFO
    assert "not shown: a draft model (MTP/EAGLE) set" in f.message
    assert _essentials(v) == _essentials(_colocated(draft="EAGLE"))


@pytest.mark.parametrize(
    ("draft", "odd"), [("none", True), ("EAGLE", False)], ids=["no-draft-model", "no-odd-rank"]
)
def test_evidence_that_contradicts_the_case_gives_no_known_cause(draft: str, odd: bool) -> None:
    """`--sglang-speculative-algorithm none`, or every scheduler of the engine in the barrier
    (none out): not sglang#17870, no finding of it."""
    v = _colocated(draft=draft, odd=odd)
    assert _finding(v, IPC_RULE) is None and _finding(v, IPC_SIMILAR) is None
    assert v.status is Status.HUNG and v.stage is Stage.WEIGHT_SYNC


def test_the_demo_colocate_hang_is_similar_not_the_known_case() -> None:
    """Demo colocate_update_hang (recorded): one scheduler per engine, no draft model: vime
    PR#168's shape fits it as well as sglang#17870's, so that case's cause is not asserted."""
    v = diagnosed(rs.bundle("demo/colocate_update_hang")).verdict
    f = _finding(v, IPC_SIMILAR)
    assert f is not None and _finding(v, IPC_RULE) is None
    assert "each engine's stacks show one scheduler at most" in f.message
    assert v.culprits[0].role is Role.SGLANG_ENGINE


def test_the_fits_are_the_three_words_the_findings_use() -> None:
    assert [f.value for f in Fit] == ["shown", "not shown", "contradicted"]
