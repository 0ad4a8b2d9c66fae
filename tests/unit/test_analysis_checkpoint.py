"""The `checkpoint` stage: a hang in checkpoint save / load is named as such, and its finding tells
storage (ranks writing, D state) from a collective mismatch (ranks in the save's collective).

The ranks' and the driver's stacks are recorded (tests/unit/recorded_stacks.py); the process table,
Ray job and kernel readings around them are built facts (analysis_builders), as before."""

from __future__ import annotations

import pytest

from slime_hangdoctor.analysis.diagnosis import diagnose
from slime_hangdoctor.facts import IoCounters, NodeKernel, ProcessKernelState, ThreadStack
from slime_hangdoctor.render.labels import headline
from slime_hangdoctor.source_spec import Observed
from slime_hangdoctor.topology import Topology
from slime_hangdoctor.verdict import (
    SCHEMA,
    Diagnosis,
    Role,
    Stage,
    Status,
    Verdict,
    verdict_from_json,
)
from tests.unit.analysis_builders import (
    member,
    proc,
    procs_obs,
    running_job,
    snapshot,
    topology,
)
from tests.unit.recorded_stacks import as_obs, checkpoint_rank, demo, recorded_thread

# Recorded stacks (tests/fixtures/README.md): the ranks' threads keep their recorded frames and flags,
# the tests give them the pids of their own topology.
# slime#1908's shape: Megatron's save down to save_state_dict_async_plan, in torch's real
# _DistWrapper.gather_object -> gather_object -> all_gather, waiting for a rank not in the save
# (stage-shapes ckpt ranks 0 and 1).
SAVE_GATHER = checkpoint_rank(0)
SAVE_GATHER_1 = checkpoint_rank(1)
# A rank writing its shard under save_checkpoint (demo fault checkpoint_slow_storage, pid 12361:
# `_write_block <- _write_shard_to_slow_storage <- save_checkpoint <- save <- save_model`).
WRITING = recorded_thread(demo("checkpoint_slow_storage"), 12361)
# A rank streaming its shard to an uploader through a pipe (demo fault checkpoint_stuck_storage,
# pid 22909: `_stream_shard_to_uploader <- save_checkpoint <- save <- save_model`).
PIPE_WRITER = recorded_thread(demo("checkpoint_stuck_storage"), 22909)
# The driver in `RayTrainGroup.save_model` (same bundle, pid 12192).
DRIVER = recorded_thread(demo("checkpoint_slow_storage"), 12192)
# Their frames, as tests/unit/test_analysis_kernel_hazards.py reads them.
SAVE_WRITE = WRITING.frames
DRIVER_SAVE = DRIVER.frames
# A train-step all_reduce (demo fault train_rank_stuck, pid 5981).
STEP = recorded_thread(demo("train_rank_stuck"), 5981)


def _members() -> Topology:
    return topology(
        member(Role.DRIVER, 100, "driver"),
        member(Role.TRAIN_RANK, 300, cls="MegatronTrainRayActor", method="save_model", rank=0),
        member(Role.TRAIN_RANK, 301, cls="MegatronTrainRayActor", method="save_model", rank=1),
    )


def _diag(rank_threads: dict[int, ThreadStack], d_state: frozenset[int] = frozenset()) -> Diagnosis:
    stacks = []
    for s in (0, 1):
        stacks.append(as_obs(100, s, DRIVER))
        stacks += [as_obs(pid, s, t) for pid, t in rank_threads.items()]
    infos = [
        procs_obs(
            s,
            proc(100, "python3 train.py", 5.0),
            *(
                proc(
                    pid,
                    "ray::MegatronTrainRayActor.save_model",
                    20.0,
                    status="disk-sleep" if pid in d_state else "sleeping",
                )
                for pid in rank_threads
            ),
        )
        for s in (0, 1)
    ]
    snap = snapshot(stacks=tuple(stacks), processes=tuple(infos), jobs=(running_job(),))
    return diagnose(snap, _members())


def _finding(v: Verdict) -> str:
    found = [f for f in v.findings if f.rule == "checkpoint-stall"]
    assert len(found) == 1, [f.rule for f in v.findings]
    return found[0].message


@pytest.mark.parametrize("native", [False, True], ids=["plain", "native"])
def test_all_ranks_in_the_saves_gather_is_a_checkpoint_hang_with_collective_steps(
    native: bool,
) -> None:
    """Both recorded ranks in the save's gather_object, as py-spy shows them plain and --native."""
    v = _diag({300: checkpoint_rank(0, native), 301: checkpoint_rank(1, native)}).verdict
    assert v.status is Status.HUNG
    assert v.stage is Stage.CHECKPOINT
    assert "All 2 rank(s)" in _finding(v)
    assert "slime#1908" in _finding(v)
    assert any("save_model" in s and "--async-save" in s for s in v.next_steps)
    assert headline(v).endswith("in checkpoint save / load")


def test_one_rank_writing_while_the_other_waits_in_the_gather_is_a_mismatch() -> None:
    v = _diag({300: SAVE_GATHER, 301: WRITING}).verdict
    assert v.stage is Stage.CHECKPOINT
    msg = _finding(v)
    assert msg.startswith("Checkpoint collective mismatch: 1 rank(s)")
    assert any("maybe_finalize_async_save" in s for s in v.next_steps)


def test_ranks_writing_in_d_state_point_at_storage_not_a_collective() -> None:
    v = _diag({300: WRITING, 301: WRITING}, d_state=frozenset({300, 301})).verdict
    assert v.stage is Stage.CHECKPOINT
    msg = _finding(v)
    assert "storage" in msg and "D state" in msg
    assert any("/proc/$p/io" in s and "300 301" in s for s in v.next_steps)
    assert not any("flight recorder" in s for s in v.next_steps)


def test_a_train_step_hang_has_no_checkpoint_finding() -> None:
    v = _diag({300: STEP, 301: STEP}).verdict
    assert v.stage is Stage.TRAIN
    assert "checkpoint-stall" not in {f.rule for f in v.findings}


def test_the_checkpoint_stage_is_part_of_the_verdict_contract() -> None:
    v = _diag({300: SAVE_GATHER, 301: SAVE_GATHER_1}).verdict
    doc = v.to_json()
    assert doc["schema"] == SCHEMA and doc["stage"] == "checkpoint"
    assert verdict_from_json(doc).stage is Stage.CHECKPOINT


def _kernel(
    pid_wchan: dict[int, str],
    wchar: dict[int, tuple[int, int]],
    traced_at_1: frozenset[int] = frozenset(),
) -> tuple[Observed[NodeKernel], ...]:
    """The kernel source's view of the ranks at both samples: each rank's wchan (the same at both,
    or py-spy's tracing stop at sample 1 for `traced_at_1`) and its wchar at sample 0 and 1
    (storage bytes flat: a pipe takes none)."""
    return tuple(
        Observed(
            "kernel",
            None,
            s,
            NodeKernel(
                tuple(
                    ProcessKernelState(
                        pid,
                        "t" if s == 1 and pid in traced_at_1 else "S",
                        "ptrace_stop" if s == 1 and pid in traced_at_1 else wchan,
                        IoCounters(0, wchar.get(pid, (0, 0))[s], 0, 4096),
                    )
                    for pid, wchan in pid_wchan.items()
                )
            ),
        )
        for s in (0, 1)
    )


def _diag_kernel(kernel: tuple[Observed[NodeKernel], ...]) -> Verdict:
    stacks = [as_obs(100, s, DRIVER) for s in (0, 1)]
    stacks += [
        as_obs(pid, s, t) for s in (0, 1) for pid, t in ((300, PIPE_WRITER), (301, SAVE_GATHER))
    ]
    infos = tuple(
        procs_obs(
            s,
            proc(100, "python3 train.py", 5.0),
            proc(300, "ray::MegatronTrainRayActor.save_model", 20.0),
            proc(301, "ray::MegatronTrainRayActor.save_model", 20.0),
        )
        for s in (0, 1)
    )
    snap = snapshot(stacks=tuple(stacks), processes=infos, jobs=(running_job(),), kernel=kernel)
    return diagnose(snap, _members()).verdict


def test_a_write_asleep_in_a_full_pipe_with_no_byte_moved_is_stuck_storage_not_a_mismatch() -> None:
    # rank 0 streams its shard to an uploader that stopped reading (anon_pipe_write, Linux 6.18);
    # rank 1 waits in the save's collective. The stacks alone read as a collective mismatch.
    assert _finding(_diag({300: PIPE_WRITER, 301: SAVE_GATHER}).verdict).startswith(
        "Checkpoint collective mismatch"
    )
    v = _diag_kernel(_kernel({300: "anon_pipe_write", 301: "futex_do_wait"}, {}))
    assert (v.status, v.stage) == (Status.HUNG, Stage.CHECKPOINT)
    msg = _finding(v)
    assert msg.startswith("Checkpoint save / load is stuck in storage, not in a collective")
    assert "in anon_pipe_write" in msg and "1 rank(s) wait for it" in msg
    assert (v.culprits[0].role, v.culprits[0].rank) == (Role.TRAIN_RANK, 0)
    assert any(f.rule == "stuck-writing" for f in v.findings)
    assert any("ls -l /proc/PID/fd" in s for s in v.next_steps)


def test_a_pipe_write_that_moves_bytes_is_not_stuck() -> None:
    v = _diag_kernel(
        _kernel({300: "anon_pipe_write", 301: "futex_do_wait"}, {300: (1 << 20, 5 << 20)})
    )
    assert not any(f.rule == "stuck-writing" for f in v.findings)
    assert _finding(v).startswith("Checkpoint collective mismatch")


def test_a_sample_taken_while_py_spy_held_the_writer_leaves_the_other_to_decide() -> None:
    # the kernel probe runs beside the py-spy dumps: one sample may catch rank 0 in tracing stop
    traced = _kernel({300: "anon_pipe_write", 301: "futex_do_wait"}, {}, frozenset({300}))
    msg = _finding(_diag_kernel(traced))
    assert "stuck in storage" in msg and "in anon_pipe_write" in msg, msg
    both = _kernel({300: "ptrace_stop", 301: "futex_do_wait"}, {}, frozenset({300}))
    assert _finding(_diag_kernel(both)).startswith("Checkpoint collective mismatch")


def test_the_partial_return_py_spys_attach_causes_is_not_a_write_moving() -> None:
    # py-spy's attach interrupts the blocked pipe write, which returns the 64 KiB it had copied
    # (wchar moves once by at most a pipe's capacity) and blocks again: still stuck
    once = _kernel({300: "anon_pipe_write", 301: "futex_do_wait"}, {300: (298969, 364505)})
    assert "stuck in storage" in _finding(_diag_kernel(once))
