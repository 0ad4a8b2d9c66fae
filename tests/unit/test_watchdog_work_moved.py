"""The watchdog's look judges whether work moved; the collector only asks (collect's
`judge_work_moved`) and takes the second sample's stacks when the answer is no.

The judge runs on the recorded demo bundles (tests/fixtures/analysis/demo, re-added record by record
to a live BundleWriter, as the collector holds them after its second sample); the collector runs for
real (`--local`) on a real process titled like a Ray worker.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from slime_hangdoctor.bundle import BundleWriter, open_bundle
from slime_hangdoctor.collect.options import CollectOptions
from slime_hangdoctor.collect.run import collect
from slime_hangdoctor.parsers.pyspy import PYSPY
from slime_hangdoctor.watchdog.look import work_moved
from tests.unit.demo_bundles import unpacked
from tests.unit.live_writer import parked_train_rank, writer_holding


@pytest.mark.parametrize(
    ("fault", "moved"),
    [
        ("none", True),  # the healthy demo job: tokens and Ray tasks move
        ("slow", True),  # slow, not hung
        ("rollout_engine_stuck", False),
        ("train_rank_stuck", False),
        ("weight_sync_engine_wedged", False),
        ("actor_queue_cycle", False),
    ],
)
def test_the_judge_reads_the_window_of_a_recorded_job(
    fault: str, moved: bool, tmp_path: Path
) -> None:
    writer = writer_holding(unpacked(fault, tmp_path / "src"), tmp_path / "live")
    assert work_moved(writer) is moved


@pytest.fixture
def worker() -> Iterator[int]:
    with parked_train_rank() as pid:
        yield pid


def _stack_samples(out: Path, pid: int) -> list[int | None]:
    with open_bundle(out) as bundle:
        return [
            r.sample
            for r in bundle.manifest.probes
            if r.source == PYSPY and r.target == f"pid{pid}"
        ]


# the watchdog's mode, on this node only, with nothing slow in it
_LOOK = CollectOptions(
    local=True, window_s=0.2, timeout_s=20.0, stacks_only_if_stalled=True, logs=False
)


@pytest.mark.parametrize("answer", [True, False])
def test_the_collector_takes_stacks_again_only_when_the_judge_says_nothing_moved(
    answer: bool, worker: int, tmp_path: Path
) -> None:
    """The judge is asked once, after the second sample, of the writer the run fills; its answer is
    the run's work_moved, and the second set of stacks is taken only on a no."""
    asked: list[int] = []

    def judge(writer: BundleWriter) -> bool:
        asked.append(max(r.sample for r in writer.records if r.sample is not None))
        return answer

    result = collect(None, _LOOK, tmp_path / "b", judge_work_moved=judge)
    assert asked == [1]  # once, with the second sample in the writer
    assert result.work_moved is answer
    assert _stack_samples(result.root, worker) == ([0] if answer else [0, 1])


def test_the_watchdogs_judge_sees_a_parked_process_stand_still(worker: int, tmp_path: Path) -> None:
    """The watchdog's own judge, given to a real run: a process parked in a read moves nothing, so
    the run says so and takes its stacks twice (a stall is judged on two sets)."""
    result = collect(None, _LOOK, tmp_path / "b", judge_work_moved=work_moved)
    assert result.work_moved is False
    assert _stack_samples(result.root, worker) == [0, 1]


def test_without_a_judge_the_stacks_are_taken_again(worker: int, tmp_path: Path) -> None:
    """No judge, no answer: the run does not claim that nothing moved, and takes both sets."""
    result = collect(None, _LOOK, tmp_path / "b")
    assert result.work_moved is None
    assert _stack_samples(result.root, worker) == [0, 1]
