"""The `checkpoint` stage: a hang in checkpoint save / load is named as such, and its finding tells
storage (ranks writing, D state) from a collective mismatch (ranks in the save's collective)."""

from __future__ import annotations

from slime_hangdoctor.analysis.diagnosis import diagnose
from slime_hangdoctor.facts import Frame, IoCounters, NodeKernel, ProcessKernelState
from slime_hangdoctor.render.labels import headline
from slime_hangdoctor.snapshot import KernelObs
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
    RAY_GET,
    F,
    actor_main,
    member,
    proc,
    procs_obs,
    running_job,
    snapshot,
    stack_obs,
    thread,
    topology,
)

# slime#1908: every train rank in this stack (Megatron paths relative to its megatron/ folder, as the
# report printed them), innermost first, above the Ray actor frames.
SAVE_GATHER = (
    F("gather", "torch/distributed/distributed_c10d.py", 4264),
    F("wrapper", "torch/distributed/c10d_logger.py", 81),
    F("gather_object", "torch/distributed/distributed_c10d.py", 3312),
    F("wrapper", "torch/distributed/c10d_logger.py", 81),
    F("gather_object", "torch/distributed/checkpoint/utils.py", 135),
    F(
        "save_state_dict_async_plan",
        "core/dist_checkpointing/strategies/state_dict_saver.py",
        141,
    ),
    F("async_save", "core/dist_checkpointing/strategies/torch.py", 797),
    F("save", "core/dist_checkpointing/strategies/base.py", 223),
    F("save", "core/dist_checkpointing/strategies/fully_parallel.py", 98),
    F("save", "core/dist_checkpointing/serialization.py", 425),
    F("save_checkpoint", "training/checkpointing.py", 573),
    F("save", "slime/backends/megatron_utils/model.py", 705),
    F("save_model", "slime/backends/megatron_utils/actor.py", 530),
    F("wrapper", "slime/utils/timer.py", 78),
)
# torch DCP's file writer (torch/distributed/checkpoint/filesystem.py) under the same save.
SAVE_WRITE = (
    F("_write_item", "torch/distributed/checkpoint/filesystem.py", 320),
    F("_write_files_from_queue", "torch/distributed/checkpoint/filesystem.py", 375),
    F("_FileSystemWriter.write_data", "torch/distributed/checkpoint/filesystem.py", 680),
    F("save", "core/dist_checkpointing/serialization.py", 425),
    F("save_checkpoint", "training/checkpointing.py", 573),
    F("save", "slime/backends/megatron_utils/model.py", 705),
    F("save_model", "slime/backends/megatron_utils/actor.py", 530),
)
DRIVER_SAVE = (
    *RAY_GET,
    F("RayTrainGroup.save_model", "slime/ray/actor_group.py", 153),
    F("train", "train.py", 76),
    F("<module>", "train.py", 120),
)


def _members() -> Topology:
    return topology(
        member(Role.DRIVER, 100, "driver"),
        member(Role.TRAIN_RANK, 300, cls="MegatronTrainRayActor", method="save_model", rank=0),
        member(Role.TRAIN_RANK, 301, cls="MegatronTrainRayActor", method="save_model", rank=1),
    )


def _diag(
    rank_frames: dict[int, tuple[Frame, ...]], d_state: frozenset[int] = frozenset()
) -> Diagnosis:
    stacks = []
    for s in (0, 1):
        stacks.append(stack_obs(100, thread(DRIVER_SAVE), sample=s))
        stacks += [stack_obs(pid, actor_main(*fr), sample=s) for pid, fr in rank_frames.items()]
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
                for pid in rank_frames
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


def test_all_ranks_in_the_saves_gather_is_a_checkpoint_hang_with_collective_steps() -> None:
    v = _diag({300: SAVE_GATHER, 301: SAVE_GATHER}).verdict
    assert v.status is Status.HUNG
    assert v.stage is Stage.CHECKPOINT
    assert "All 2 rank(s)" in _finding(v)
    assert "slime#1908" in _finding(v)
    assert any("save_model" in s and "--async-save" in s for s in v.next_steps)
    assert headline(v).endswith("in checkpoint save / load")


def test_one_rank_writing_while_the_other_waits_in_the_gather_is_a_mismatch() -> None:
    v = _diag({300: SAVE_GATHER, 301: SAVE_WRITE}).verdict
    assert v.stage is Stage.CHECKPOINT
    msg = _finding(v)
    assert msg.startswith("Checkpoint collective mismatch: 1 rank(s)")
    assert any("maybe_finalize_async_save" in s for s in v.next_steps)


def test_ranks_writing_in_d_state_point_at_storage_not_a_collective() -> None:
    v = _diag({300: SAVE_WRITE, 301: SAVE_WRITE}, d_state=frozenset({300, 301})).verdict
    assert v.stage is Stage.CHECKPOINT
    msg = _finding(v)
    assert "storage" in msg and "D state" in msg
    assert any("/proc/$p/io" in s and "300 301" in s for s in v.next_steps)
    assert not any("flight recorder" in s for s in v.next_steps)


def test_a_train_step_hang_has_no_checkpoint_finding() -> None:
    step = (
        F("all_reduce", "torch/distributed/distributed_c10d.py", 2806),
        F("train_one_step", "slime/backends/megatron_utils/model.py", 400),
        F("train", "slime/backends/megatron_utils/model.py", 600),
    )
    v = _diag({300: step, 301: step}).verdict
    assert v.stage is Stage.TRAIN
    assert "checkpoint-stall" not in {f.rule for f in v.findings}


def test_the_checkpoint_stage_is_part_of_the_verdict_contract() -> None:
    v = _diag({300: SAVE_GATHER, 301: SAVE_GATHER}).verdict
    doc = v.to_json()
    assert doc["schema"] == SCHEMA and doc["stage"] == "checkpoint"
    assert verdict_from_json(doc).stage is Stage.CHECKPOINT


def _kernel(
    pid_wchan: dict[int, str],
    wchar: dict[int, tuple[int, int]],
    traced_at_1: frozenset[int] = frozenset(),
) -> tuple[KernelObs, ...]:
    """The kernel source's view of the ranks at both samples: each rank's wchan (the same at both,
    or py-spy's tracing stop at sample 1 for `traced_at_1`) and its wchar at sample 0 and 1
    (storage bytes flat: a pipe takes none)."""
    return tuple(
        KernelObs(
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


def _diag_kernel(kernel: tuple[KernelObs, ...]) -> Verdict:
    stacks = [stack_obs(100, thread(DRIVER_SAVE), sample=s) for s in (0, 1)]
    stacks += [
        stack_obs(pid, actor_main(*fr), sample=s)
        for s in (0, 1)
        for pid, fr in ((300, SAVE_WRITE), (301, SAVE_GATHER))
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
    assert _finding(_diag({300: SAVE_WRITE, 301: SAVE_GATHER}).verdict).startswith(
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
