"""The kernel and log sources on recorded demo bundles (tests/fixtures/analysis/demo, provenance in
tests/fixtures/README.md): each demo fault gets its verdict with its source, and a wrong one when
that source's records are removed (`transforms.bundle_without_sources`).

- `checkpoint_slow_storage` (verl#2238 shape): rank 0 writes the checkpoint to slow storage while
  rank 1 waits in save_checkpoint's barrier. The stacks are the same at both samples; only
  /proc/<pid>/io says the save moves. With the kernel source: progressing, no culprit. Without it:
  hung in `checkpoint`, rank 0 blamed, and `checkpoint-stall` calls it a collective mismatch.
- `checkpoint_stuck_storage` (slime#1908 / verl#2238 "storage or collective?"): rank 0 streams the
  checkpoint to an uploader that stopped reading; its write sleeps in pipe_write with no byte moved.
  With the kernel source: `checkpoint-stall` says stuck storage (and `stuck-writing`). Without it:
  the same status, stage and culprit, but `checkpoint-stall` reads a collective mismatch.
- `train_custom_loss_stuck` (slime#1487 shape): slime's FSDP backend; its frames name the stage
  (`train`) and rank 0's open `Timer actor_train start` agrees. Without the logs: the same stage
  and culprit (logs never decide the culprit).
"""

from __future__ import annotations

import tarfile
from pathlib import Path

from slime_hangdoctor.parsers.kernel import KERNEL
from slime_hangdoctor.parsers.logs import RAY_LOGS
from slime_hangdoctor.parsers.sockets import SOCKETS
from slime_hangdoctor.verdict import Finding, Role, Stage, Status, Verdict
from tests.fixtures import transforms as tf
from tests.unit.demo_bundles import DEMO, diagnosed, unpacked

FAULT_RANK = 1
# pids of the checkpoint_stuck_storage recording (tests/fixtures/README.md)
# CI's live run of the same fault, recorded (demo2/checkpoint_stuck_storage_running, the README)
RUNNING_AT_FIRST = DEMO.parent / "demo2" / "checkpoint_stuck_storage_running.tar.gz"
RANK_0_THEN = 28844
FUTEX_THEN = 28961  # asleep in futex_do_wait at both samples of that recording


def _finding(v: Verdict, rule: str) -> Finding:
    found = [f for f in v.findings if f.rule == rule]
    assert len(found) == 1, [f.rule for f in v.findings]
    return found[0]


# --------------------------------------------------------------------------- kernel source


def test_slow_checkpoint_storage_is_progress_by_the_bytes_it_writes(tmp_path: Path) -> None:
    d = diagnosed(unpacked("checkpoint_slow_storage", tmp_path))
    v = d.verdict
    assert (v.status, v.stage) == (Status.PROGRESSING, Stage.NONE), v.summary
    assert v.culprits == ()
    assert v.extra.get("current_stage") == Stage.CHECKPOINT.value
    io = _finding(v, "storage-io")
    assert len(io.evidence) == 1 and io.evidence[0].startswith("train rank 0"), io.evidence
    progress = _finding(v, "progress")
    assert any(
        e.startswith("train rank 0:") and "to storage between the samples" in e
        for e in progress.evidence
    ), progress
    assert not any(f.rule == "checkpoint-stall" for f in v.findings)
    rank1 = next(r for r in d.rows if r.role is Role.TRAIN_RANK and r.label.endswith("1"))
    assert rank1.stage is Stage.CHECKPOINT  # it waits in the save's barrier, as a hang would show


def test_without_the_kernel_source_the_slow_save_is_called_a_hang(tmp_path: Path) -> None:
    root = unpacked("checkpoint_slow_storage", tmp_path / "src")
    without = tf.bundle_without_sources(root, tmp_path / "without", frozenset({KERNEL}))
    v = diagnosed(without).verdict
    assert (v.status, v.stage) == (Status.HUNG, Stage.CHECKPOINT), v.summary
    assert v.culprits and v.culprits[0].role is Role.TRAIN_RANK and v.culprits[0].rank == 0
    assert "collective mismatch" in _finding(v, "checkpoint-stall").message
    assert not any(f.rule == "storage-io" for f in v.findings)
    kept = tf.bundle_without_sources(root, tmp_path / "kept", frozenset({SOCKETS, RAY_LOGS}))
    assert diagnosed(kept).verdict.status is Status.PROGRESSING  # not those sources


def test_a_write_stuck_in_a_full_pipe_is_stuck_storage(tmp_path: Path) -> None:
    v = diagnosed(unpacked("checkpoint_stuck_storage", tmp_path)).verdict
    assert (v.status, v.stage) == (Status.HUNG, Stage.CHECKPOINT), v.summary
    assert (v.culprits[0].role, v.culprits[0].rank) == (Role.TRAIN_RANK, 0)
    stall = _finding(v, "checkpoint-stall").message
    assert stall.startswith("Checkpoint save / load is stuck in storage, not in a collective")
    assert "pipe_write across the samples" in stall, stall
    blocked = _finding(v, "stuck-writing")
    assert [e.split(" (pid")[0] for e in blocked.evidence] == ["train rank 0"]
    assert "kernel" in _finding(v, "culprit").message


def test_a_stuck_write_read_running_at_one_sample_is_still_stuck_storage(tmp_path: Path) -> None:
    """CI's failure, recorded (demo2): py-spy's attach interrupts the blocked write, which
    restarts; on the loaded box rank 0 waited in the run queue at the first sample (R, wchan 0)
    and was asleep in anon_pipe_write at the second, 64 KiB handed over in between."""
    v = diagnosed(RUNNING_AT_FIRST).verdict
    assert (v.status, v.stage) == (Status.HUNG, Stage.CHECKPOINT), v.summary
    assert [(c.role, c.rank, c.pid) for c in v.culprits] == [(Role.TRAIN_RANK, 0, RANK_0_THEN)]
    blocked = _finding(v, "stuck-writing")
    assert [e.split(" (pid")[0] for e in blocked.evidence] == ["train rank 0"]
    assert "state S, in anon_pipe_write" in blocked.evidence[0], blocked.evidence
    stall = _finding(v, "checkpoint-stall").message
    assert stall.startswith("Checkpoint save / load is stuck in storage, not in a collective")


def test_running_then_asleep_elsewhere_is_not_a_stuck_write(tmp_path: Path) -> None:
    """The same recording with rank 0's second reading borrowed from a process asleep on a futex
    in that sample: no sample shows a write wait, and nothing says stuck writing."""
    root = _unpacked_archive(RUNNING_AT_FIRST, tmp_path / "src")
    slept = tf.bundle_with_kernel_reading_as(root, tmp_path / "slept", RANK_0_THEN, 1, FUTEX_THEN)
    v = diagnosed(slept).verdict
    assert "stuck-writing" not in [f.rule for f in v.findings]


def _unpacked_archive(archive: Path, dest: Path) -> Path:
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    return next(p.parent for p in dest.rglob("manifest.json"))


def test_without_the_kernel_source_the_stuck_write_reads_as_a_collective_mismatch(
    tmp_path: Path,
) -> None:
    root = unpacked("checkpoint_stuck_storage", tmp_path / "src")
    without = tf.bundle_without_sources(root, tmp_path / "without", frozenset({KERNEL}))
    v = diagnosed(without).verdict
    assert (v.status, v.stage) == (Status.HUNG, Stage.CHECKPOINT), v.summary
    assert _finding(v, "checkpoint-stall").message.startswith("Checkpoint collective mismatch")
    assert not any(f.rule == "stuck-writing" for f in v.findings)


# --------------------------------------------------------------------------- logs source


def test_the_fsdp_frames_name_the_stage_and_the_open_timer_agrees(tmp_path: Path) -> None:
    d = diagnosed(unpacked("train_custom_loss_stuck", tmp_path))
    v = d.verdict
    assert (v.status, v.stage) == (Status.HUNG, Stage.TRAIN), v.summary
    top = v.culprits[0]
    assert (top.role, top.rank) == (Role.TRAIN_RANK, FAULT_RANK), v.summary
    timer = _finding(v, "log-open-timer")
    assert "`Timer actor_train start`" in timer.message, timer.message
    assert "it agrees with the stage found live" in timer.message
    # slime's FSDP frames (FSDPTrainRayActor._train_step, signatures/slime.py) place both ranks
    assert all(r.stage is Stage.TRAIN for r in d.rows if r.role is Role.TRAIN_RANK)


def test_without_the_logs_source_the_fsdp_frames_still_name_the_stage_and_the_culprit(
    tmp_path: Path,
) -> None:
    root = unpacked("train_custom_loss_stuck", tmp_path / "src")
    without = tf.bundle_without_sources(root, tmp_path / "without", frozenset({RAY_LOGS}))
    v = diagnosed(without).verdict
    assert (v.status, v.stage) == (Status.HUNG, Stage.TRAIN), v.summary
    assert (v.culprits[0].role, v.culprits[0].rank) == (Role.TRAIN_RANK, FAULT_RANK)
    assert not any(f.rule.startswith("log-") for f in v.findings)
    kept = tf.bundle_without_sources(root, tmp_path / "kept", frozenset({KERNEL, SOCKETS}))
    assert diagnosed(kept).verdict.stage is Stage.TRAIN  # not those sources
