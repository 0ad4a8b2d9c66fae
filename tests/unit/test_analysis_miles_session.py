"""miles main's weight-update session (issue 35 items 1, 2 and 6): the demo job laid out as miles
opens a session on every engine around each weight update (SGLangEngine.begin_weight_update /
end_weight_update, radixark/miles 31f1ca961 sglang_engine.py:636-642, from update_weight/common.py:
411,427), and SGLang 0.5.23 serves it (`/begin_weight_update`, `/end_weight_update`). Recorded live
(tests/fixtures/analysis/demo/weight_update_session_stuck.tar.gz, provenance in
tests/fixtures/README.md): engine 1's scheduler never returns from its begin_weight_update. The
engine gets weight_sync and is the culprit; before the miles rows the top culprit was train rank 0
(its ray.get in begin_weight_update read as a rank not in its peers' collective)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slime_hangdoctor.analysis.readers.sglang_http import CALL_STAGES, read_engines
from slime_hangdoctor.analysis.signatures import match_frame, method_stage
from slime_hangdoctor.analysis.world import build_world
from slime_hangdoctor.parsers.processes import SPEC as PROCESSES
from slime_hangdoctor.parsers.pyspy import ALL_STACKS
from slime_hangdoctor.pipeline import analyse_bundle
from slime_hangdoctor.verdict import Role, Stage, Status

BUNDLE = (
    Path(__file__).resolve().parents[1]
    / "fixtures"
    / "analysis"
    / "demo"
    / "weight_update_session_stuck.tar.gz"
)
STUCK_ACTOR = 7551  # engine 1's SGLangEngine actor in the recording
STUCK_SCHEDULER = 8837  # its sglang::scheduler_TP0


@pytest.fixture(scope="module")
def analysed():  # type: ignore[no-untyped-def]
    return analyse_bundle(BUNDLE)


def _stack(analysed, pid: int, sample: int = 1) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    obs = next(s for s in analysed.snapshot.joined(ALL_STACKS) if s.pid == pid and s.sample == sample)
    return [(f.name, f.short_filename or f.filename) for t in obs.stack.threads for f in t.frames]


def test_the_recording_has_the_shape_miles_runs(analysed) -> None:  # type: ignore[no-untyped-def]
    """Guard on the fixture: the actor runs miles's SGLangEngine.begin_weight_update (its file under
    miles/), its scheduler is in SGLang's begin_weight_update, and the other engine answered."""
    procs = {p.pid: p for o in analysed.snapshot.facts(PROCESSES) for p in o.fact}
    assert procs[STUCK_ACTOR].title == "ray::SGLangEngine.begin_weight_update"
    titles = [p.title for p in procs.values() if p.title.startswith("ray::SGLangEngine")]
    assert sorted(titles) == ["ray::SGLangEngine", "ray::SGLangEngine.begin_weight_update"]
    obs = next(s for s in analysed.snapshot.joined(ALL_STACKS) if s.pid == STUCK_SCHEDULER and s.sample == 1)
    (names,) = [
        [f.name for f in t.frames]
        for t in obs.stack.threads
        if any("begin_weight_update" in f.name for f in t.frames)
    ]
    assert names[:3] == [
        "_block_forever",
        "ModelRunner.begin_weight_update",
        "SchedulerWeightUpdaterMixin.begin_weight_update",
    ]
    files = {f for pid in (STUCK_ACTOR,) for _, f in _stack(analysed, pid)}
    assert any(f.endswith("miles/backends/sglang_utils/sglang_engine.py") for f in files)


def test_the_tables_place_each_part_of_the_session_in_weight_sync(analysed) -> None:  # type: ignore[no-untyped-def]
    obs = next(s for s in analysed.snapshot.joined(ALL_STACKS) if s.pid == STUCK_ACTOR and s.sample == 1)
    frame = next(f for t in obs.stack.threads for f in t.frames if "begin_weight_update" in f.name)
    sig = match_frame(frame)
    assert sig is not None and sig.stage is Stage.WEIGHT_SYNC and sig.file is not None
    assert sig.file.startswith("miles/")
    sched = next(s for s in analysed.snapshot.joined(ALL_STACKS) if s.pid == STUCK_SCHEDULER and s.sample == 1)
    frames = [f for t in sched.stack.threads for f in t.frames if "begin_weight_update" in f.name]
    assert frames and all(
        (sig := match_frame(f)) is not None and sig.stage is Stage.WEIGHT_SYNC for f in frames
    )
    ray_row = method_stage("SGLangEngine", "begin_weight_update")
    assert ray_row is not None and ray_row.stage is Stage.WEIGHT_SYNC
    assert CALL_STAGES["/begin_weight_update"] is Stage.WEIGHT_SYNC


def test_the_engine_stuck_in_begin_weight_update_is_the_culprit(analysed) -> None:  # type: ignore[no-untyped-def]
    v = analysed.diagnosis.verdict
    assert (v.status, v.stage) == (Status.HUNG, Stage.WEIGHT_SYNC), v.summary
    world = build_world(analysed.snapshot, analysed.topology)
    stuck = next(
        e for e in read_engines(world) if e.actor is not None and e.actor.pid == STUCK_ACTOR
    )
    assert "/begin_weight_update" in stuck.calls_held
    assert [c.role for c in v.culprits] == [Role.SGLANG_ENGINE]
    assert v.culprits[0].engine_url == stuck.url, v.culprits
    assert "begin_weight_update" in v.culprits[0].why
