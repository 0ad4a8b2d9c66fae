"""Stages of the stack shapes of slime main and miles (issue 24 items 1 and 5), on the threads of one
real process recorded by tests/fixtures/real/layout-shapes/capture_layout_shapes.py: each thread
runs a chain of the real tree's (file, function) pairs, as py-spy prints them, read through the
product's own py-spy parser and stack reader."""

from __future__ import annotations

import pytest

from slime_hangdoctor.analysis import signatures as sg
from slime_hangdoctor.analysis.readers.pyspy import find_stage, read_thread
from slime_hangdoctor.verdict import Stage
from tests.unit.recorded_stacks import layout_shape_thread

# slime 624b824: the HF save of hf_checkpoint_saver.py runs under the disk weight sync and under
# the HF checkpoint save; the outer frame decides (item 1: "disk weight sync reads as weight sync").
SLIME_MAIN = (
    ("disk weight sync finalizing", Stage.WEIGHT_SYNC),
    ("disk weight sync converting", Stage.WEIGHT_SYNC),
    ("HF checkpoint save writing", Stage.CHECKPOINT),
    ("HF checkpoint save converting", Stage.CHECKPOINT),
    ("disk reload driver", Stage.WEIGHT_SYNC),
    ("engine disk reload", Stage.WEIGHT_SYNC),
)


@pytest.mark.parametrize(("label", "stage"), SLIME_MAIN)
def test_slime_main_shape_reads_as_its_stage(label: str, stage: Stage) -> None:
    thread = layout_shape_thread(label)
    assert find_stage(thread.frames)[0] is stage
    assert read_thread(thread, pid=1).stage is stage


def test_the_hf_save_alone_reads_as_checkpoint() -> None:
    """With no outer frame (the chain cut at save_hf_model_to_path) the shared saver is a save."""
    frames = layout_shape_thread("disk weight sync finalizing").frames
    k = next(i for i, f in enumerate(frames) if f.name == "save_hf_model_to_path")
    assert find_stage(frames[: k + 1])[0] is Stage.CHECKPOINT
    sig = sg.match_frame(frames[k])
    assert sig is not None and sig.generic and sg.layouts_of(sig) == ("2026-08",)


# miles 31f1ca961: its moved files and its own classes (item 5)
MILES = (
    ("miles router start", Stage.STARTUP),
    ("miles start servers", Stage.STARTUP),
    ("miles convert", Stage.ROLLOUT_DISPATCH),
    ("miles offload", Stage.OFFLOAD_ONLOAD),
    ("miles reward", Stage.REWARD),
    ("miles FSDP weight sync", Stage.WEIGHT_SYNC),
    ("miles FSDP train", Stage.TRAIN),
)


@pytest.mark.parametrize(("label", "stage"), MILES)
def test_miles_shape_reads_as_its_stage(label: str, stage: Stage) -> None:
    thread = layout_shape_thread(label)
    assert find_stage(thread.frames)[0] is stage
    assert read_thread(thread, pid=1).stage is stage


@pytest.mark.parametrize(("label", "_stage"), MILES)
def test_miles_frames_tell_the_miles_layout(label: str, _stage: Stage) -> None:
    """The innermost frame that decides is a row of the miles layout only."""
    thread = layout_shape_thread(label)
    _, _, sig = find_stage(thread.frames)
    assert sig is not None and sg.layouts_of(sig) == ("miles-2026-08",)
