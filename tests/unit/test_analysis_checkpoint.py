"""The `checkpoint` stage: a hang in checkpoint save / load is named as such, and its finding tells
storage (ranks writing, D state) from a collective mismatch (ranks in the save's collective).

Everything the rules read is recorded (provenance: tests/fixtures/README.md): the ranks' and the
driver's stacks (tests/unit/recorded_stacks.py); their process rows and the kernel source's readings
(state, wchan, I/O counters) from the demo bundles `checkpoint_slow_storage` and
`checkpoint_stuck_storage`, and the shapes those do not show (a rank in D state, a pipe write whose
wchar moves, a writer read in py-spy's tracing stop) from tests/fixtures/real/checkpoint-readings,
read by the product's own collectors from real processes. Each is moved to the pid of the test's
topology by the named transformations of tests/fixtures/transforms/; the snapshot around them is
built with analysis_builders."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from slime_hangdoctor.analysis.diagnosis import diagnose
from slime_hangdoctor.analysis.parts.kernel import IO_PROGRESS_BYTES
from slime_hangdoctor.parsers.kernel import SPEC as KERNEL
from slime_hangdoctor.parsers.kernel import NodeKernel, ProcessKernelState, parse_kernel
from slime_hangdoctor.parsers.processes import ProcessInfo, parse_processes
from slime_hangdoctor.parsers.pyspy import ThreadStack
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
from tests.fixtures import transforms as tf
from tests.unit import recorded_shapes as rs
from tests.unit.analysis_builders import (
    NODE,
    member,
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


# Process rows and kernel readings, recorded (tests/fixtures/README.md). The demo's rows of the two
# save_model ranks and the driver (slow storage: 12361, 12417, 12192; stuck storage: 22909, 22966,
# 22757), each moved to the test's pid: rank 0 -> 300, rank 1 -> 301, driver -> 100.
SLOW = rs.bundle("demo/checkpoint_slow_storage")
STUCK = rs.bundle("demo/checkpoint_stuck_storage")
SLOW_ROWS = {100: 12192, 300: 12361, 301: 12417}
STUCK_ROWS = {100: 22757, 300: 22909, 301: 22966}
READINGS = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "checkpoint-readings"
# psutil's row of a process whose main thread waits in D (posix_spawn's vfork wait): status
# "disk-sleep".
(D_ROW, _) = parse_processes((READINGS / "disk_sleep.processes.json").read_text())


def _members() -> Topology:
    return topology(
        member(Role.DRIVER, 100, "driver"),
        member(Role.TRAIN_RANK, 300, cls="MegatronTrainRayActor", method="save_model", rank=0),
        member(Role.TRAIN_RANK, 301, cls="MegatronTrainRayActor", method="save_model", rank=1),
    )


def _rows(bundle: Path, pids: dict[int, int], sample: int) -> tuple[ProcessInfo, ...]:
    """The recorded rows of `pids` (test pid -> recorded pid) at `sample`, at the test's pids."""
    return tuple(rs.process(bundle, rec, sample, as_pid=pid) for pid, rec in pids.items())


def _diag(rank_threads: dict[int, ThreadStack], d_state: frozenset[int] = frozenset()) -> Diagnosis:
    """The ranks' threads with the slow-storage demo's rows; the ranks of `d_state` read in D
    (`transforms.process_in_state_of` the recorded D-state row)."""
    stacks = []
    for s in (0, 1):
        stacks.append(as_obs(100, s, DRIVER))
        stacks += [as_obs(pid, s, t) for pid, t in rank_threads.items()]
    infos = [
        procs_obs(
            s,
            *(
                tf.process_in_state_of(row, D_ROW) if row.pid in d_state else row
                for row in _rows(SLOW, {p: SLOW_ROWS[p] for p in (100, *rank_threads)}, s)
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
    assert any("save_model" in s and "--async-save" in s for s in v.step_texts)
    assert headline(v).endswith("in checkpoint save / load")


def test_one_rank_writing_while_the_other_waits_in_the_gather_is_a_mismatch() -> None:
    v = _diag({300: SAVE_GATHER, 301: WRITING}).verdict
    assert v.stage is Stage.CHECKPOINT
    msg = _finding(v)
    assert msg.startswith("Checkpoint collective mismatch: 1 rank(s)")
    assert any("maybe_finalize_async_save" in s for s in v.step_texts)


def test_ranks_writing_in_d_state_point_at_storage_not_a_collective() -> None:
    v = _diag({300: WRITING, 301: WRITING}, d_state=frozenset({300, 301})).verdict
    assert v.stage is Stage.CHECKPOINT
    msg = _finding(v)
    assert "storage" in msg and "D state" in msg
    assert any("/proc/$p/io" in s and "300 301" in s for s in v.step_texts)
    assert not any("flight recorder" in s for s in v.step_texts)


def test_a_train_step_hang_has_no_checkpoint_finding() -> None:
    v = _diag({300: STEP, 301: STEP}).verdict
    assert v.stage is Stage.TRAIN
    assert "checkpoint-stall" not in {f.rule for f in v.findings}


def test_the_checkpoint_stage_is_part_of_the_verdict_contract() -> None:
    v = _diag({300: SAVE_GATHER, 301: SAVE_GATHER_1}).verdict
    doc = v.to_json()
    assert doc["schema"] == SCHEMA and doc["stage"] == "checkpoint"
    assert verdict_from_json(doc).stage is Stage.CHECKPOINT


# A rank's kernel readings at sample 0 and 1, as the kernel source recorded them.
Pair = tuple[ProcessKernelState, ProcessKernelState]


def _demo_state(bundle: Path, pid: int, sample: int) -> ProcessKernelState:
    obs = next(o for o in rs.recorded(bundle).facts(KERNEL) if o.sample == sample)
    return next(k for k in obs.fact.processes if k.pid == pid)


def _captured(name: str) -> ProcessKernelState:
    """The one process reading of checkpoint-readings/`name`.json (collect/kernel.py's artefact)."""
    (state,) = parse_kernel((READINGS / f"{name}.json").read_text()).processes
    return state


# Rank 1 of the stuck-storage demo (22966) in save_checkpoint's barrier: futex_do_wait, flat.
BARRIER: Pair = (_demo_state(STUCK, 22966, 0), _demo_state(STUCK, 22966, 1))
# Rank 0 of the stuck-storage demo (22909) streaming to an uploader that stopped reading:
# anon_pipe_write at both samples, storage bytes flat, wchar up by exactly 65536 once (sample 0's
# py-spy attach interrupted the blocked write, which returned the 64 KiB it had copied).
DEMO_PIPE: Pair = (_demo_state(STUCK, 22909, 0), _demo_state(STUCK, 22909, 1))
# A writer asleep in a full pipe that nothing reads, read 1 s apart before any tracer: wchar 0.
FULL_PIPE: Pair = (_captured("pipe_full.s0"), _captured("pipe_full.s1"))
# A writer in a pipe whose reader drains it slowly: anon_pipe_write at both, wchar up by MiBs.
DRAINING: Pair = (_captured("pipe_draining.s0"), _captured("pipe_draining.s1"))
# The full-pipe writer, then read while py-spy's dump held it (state t, ptrace_stop).
TRACED_AT_1: Pair = (FULL_PIPE[1], _captured("pipe_full_traced.s0"))
TRACED_BOTH: Pair = (_captured("pipe_full_traced.s0"), _captured("pipe_full_traced.s1"))


def _kernel(rank0: Pair, rank1: Pair = BARRIER) -> tuple[Observed[NodeKernel], ...]:
    """The kernel source's view of the ranks at both samples: the stuck-storage demo's node
    readings, listing the recorded readings of rank 0 and 1 at pids 300 and 301."""
    out = []
    for s in (0, 1):
        obs = next(o for o in rs.recorded(STUCK).facts(KERNEL) if o.sample == s)
        states = (
            tf.kernel_state_relabelled(rank0[s], pid=300),
            tf.kernel_state_relabelled(rank1[s], pid=301),
        )
        node = tf.kernel_with_processes(obs.fact, states)
        out.append(dataclasses.replace(obs, node_ip=NODE, fact=node))
    return tuple(out)


def _diag_kernel(kernel: tuple[Observed[NodeKernel], ...]) -> Verdict:
    """Rank 0 streaming its shard (the stuck-storage demo's stack), rank 1 in the save's gather,
    with the stuck-storage demo's process rows and `kernel`."""
    stacks = [as_obs(100, s, DRIVER) for s in (0, 1)]
    stacks += [
        as_obs(pid, s, t) for s in (0, 1) for pid, t in ((300, PIPE_WRITER), (301, SAVE_GATHER))
    ]
    infos = tuple(procs_obs(s, *_rows(STUCK, STUCK_ROWS, s)) for s in (0, 1))
    snap = snapshot(stacks=tuple(stacks), processes=infos, jobs=(running_job(),), kernel=kernel)
    return diagnose(snap, _members()).verdict


def _wchar_delta(pair: Pair) -> int:
    a, b = (k.io for k in pair)
    assert a is not None and b is not None
    return b.wchar - a.wchar


def test_a_write_asleep_in_a_full_pipe_with_no_byte_moved_is_stuck_storage_not_a_mismatch() -> None:
    # rank 0 streams its shard to an uploader that stopped reading (anon_pipe_write, Linux 6.18);
    # rank 1 waits in the save's collective. The stacks alone read as a collective mismatch.
    assert _finding(_diag({300: PIPE_WRITER, 301: SAVE_GATHER}).verdict).startswith(
        "Checkpoint collective mismatch"
    )
    assert _wchar_delta(FULL_PIPE) == 0
    v = _diag_kernel(_kernel(FULL_PIPE))
    assert (v.status, v.stage) == (Status.HUNG, Stage.CHECKPOINT)
    msg = _finding(v)
    assert msg.startswith("Checkpoint save / load is stuck in storage, not in a collective")
    assert "in anon_pipe_write" in msg and "1 rank(s) wait for it" in msg
    assert (v.culprits[0].role, v.culprits[0].rank) == (Role.TRAIN_RANK, 0)
    assert any(f.rule == "stuck-writing" for f in v.findings)
    assert any("ls -l /proc/PID/fd" in s for s in v.step_texts)


def test_a_pipe_write_that_moves_bytes_is_not_stuck() -> None:
    """The writer asleep in pipe_write at both samples while its reader drains the pipe: its
    bytes move, so the save is slow, not stuck, and not a collective mismatch either (issue 34
    item 1: a process whose wait is I/O is judged by its bytes, `rchar` + `wchar` included)."""
    assert _wchar_delta(DRAINING) >= IO_PROGRESS_BYTES
    v = _diag_kernel(_kernel(DRAINING))
    assert not any(f.rule in ("stuck-writing", "checkpoint-stall") for f in v.findings)
    assert v.status is Status.PROGRESSING, v.summary
    (io,) = [f for f in v.findings if f.rule == "storage-io"]
    assert io.evidence[0].startswith("train rank 0 (pid 300)") and "slow: " in io.evidence[0]


def test_a_sample_taken_while_py_spy_held_the_writer_leaves_the_other_to_decide() -> None:
    # the kernel probe runs beside the py-spy dumps: one sample may catch rank 0 in tracing stop
    assert [k.state for k in TRACED_AT_1] == ["S", "t"]
    msg = _finding(_diag_kernel(_kernel(TRACED_AT_1)))
    assert "stuck in storage" in msg and "in anon_pipe_write" in msg, msg
    assert [k.wchan for k in TRACED_BOTH] == ["ptrace_stop", "ptrace_stop"]
    assert _finding(_diag_kernel(_kernel(TRACED_BOTH))).startswith("Checkpoint collective mismatch")


def test_the_partial_return_py_spys_attach_causes_is_not_a_write_moving() -> None:
    # py-spy's attach interrupts the blocked pipe write, which returns the 64 KiB it had copied
    # (wchar moves once by at most a pipe's capacity) and blocks again: still stuck. The demo
    # recorded it so, and the reproducer's writer the same way (pipe_full.s1 -> pipe_full_traced.s0).
    assert _wchar_delta(DEMO_PIPE) == 65536 == _wchar_delta(TRACED_AT_1)
    assert "stuck in storage" in _finding(_diag_kernel(_kernel(DEMO_PIPE)))
