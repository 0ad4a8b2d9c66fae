"""A pause in the middle of a healthy weight update is not an engine left paused (issue 21 item 4).

`demo2/none` (provenance in tests/fixtures/README.md) is the healthy demo job recorded at the moment
Ray's task history caught a weight update between its pause and its continue: both engines'
`pause_generation` FINISHED, no `continue_generation` yet, and train rank 0's `update_weights`,
which called the pauses, still RUNNING; between the samples both engines' weight_version moved
(3 -> 4). The job progresses: no warning, no suspect, an info finding naming the update in flight.
Derived by named transformations: the same answers once that update had ended
(`transforms.bundle_with_task_ended`), where the engines' own progress still clears them; and that
without the engines' probes (`transforms.bundle_without_sources`), where nothing clears the pause
and the warning stands: the rule still finds an engine left paused.
"""

from __future__ import annotations

from pathlib import Path

from slime_hangdoctor.analysis.actor_queues import build_view
from slime_hangdoctor.parsers.sglang import SGLANG
from slime_hangdoctor.pipeline import analyse_bundle
from slime_hangdoctor.verdict import Finding, Severity, Status, Verdict
from tests.fixtures import transforms as tf
from tests.unit.demo_bundles import DEMO

HEALTHY = DEMO.parent / "demo2" / "none.tar.gz"
UPDATE = "MegatronTrainRayActor.update_weights"


def _unpacked(dest: Path) -> Path:
    import tarfile

    with tarfile.open(HEALTHY) as tar:
        tar.extractall(dest, filter="data")
    return next(p.parent for p in dest.rglob("manifest.json"))


def _paused_findings(v: Verdict) -> list[Finding]:
    return [f for f in v.findings if f.rule.startswith("ray_tasks.engine_paused")]


def test_a_pause_caught_mid_update_on_a_healthy_job_is_no_warning() -> None:
    a = analyse_bundle(HEALTHY)
    view = build_view(a.snapshot)
    assert view is not None and not view.history_partial
    assert len(view.paused) == 2  # the history did catch both engines between pause and continue
    assert {p.update.name if p.update else None for p in view.paused} == {UPDATE}
    v = a.diagnosis.verdict
    assert v.status is Status.PROGRESSING and v.culprits == ()
    found = _paused_findings(v)
    assert [f.rule for f in found] == ["ray_tasks.engine_paused_in_update"] * 2
    assert all(f.severity is Severity.INFO for f in found)
    assert all(
        "train rank 0's update_weights called its pause_generation" in f.message for f in found
    )
    assert not any(f.severity is not Severity.INFO for f in v.findings), [
        (f.rule, f.severity) for f in v.findings
    ]


def test_an_engine_that_served_is_not_left_paused_once_the_update_ended(tmp_path: Path) -> None:
    src = _unpacked(tmp_path / "src")
    view = build_view(analyse_bundle(src).snapshot)
    assert view is not None
    (update_id,) = {p.update.task_id for p in view.paused if p.update is not None}
    ended = tf.bundle_with_task_ended(src, tmp_path / "ended", update_id)
    a = analyse_bundle(ended)
    after = build_view(a.snapshot)
    assert after is not None and [p.update for p in after.paused] == [None, None]
    v = a.diagnosis.verdict
    assert v.status is Status.PROGRESSING
    found = _paused_findings(v)
    assert [f.severity for f in found] == [Severity.INFO, Severity.INFO]
    assert all(
        "served between the samples (weight_version moved: 3 -> 4)" in f.message for f in found
    )
    # without the engines' own answers nothing clears the pause: the rule still warns
    blind = tf.bundle_without_sources(ended, tmp_path / "blind", frozenset({SGLANG}))
    warned = _paused_findings(analyse_bundle(blind).diagnosis.verdict)
    assert [(f.rule, f.severity) for f in warned] == [
        ("ray_tasks.engine_paused", Severity.WARNING)
    ] * 2
    assert all("is left paused" in f.message for f in warned)
    # the steps fit the state (issue 42 item 3): the call that resumes each engine left paused,
    # with the warning not to probe it with calls that change its state; no step twice
    steps = analyse_bundle(blind).diagnosis.verdict.next_steps
    resumes = [s for s in steps if s.command and s.command.endswith("/continue_generation")]
    rules = {"parts/ray_tasks:resume_paused", "advice:culprit_steps"}  # the engine may be blamed
    assert len(resumes) == 2 and all(s.by in rules for s in resumes)
    assert all("do not probe a paused engine" in s.why for s in resumes)
    assert len({s.key for s in steps}) == len(steps)
    # a healthy pause (the update still runs) gets no such step
    healthy = analyse_bundle(src).diagnosis.verdict.next_steps
    assert not any(s.command and "continue_generation" in s.command for s in healthy)
