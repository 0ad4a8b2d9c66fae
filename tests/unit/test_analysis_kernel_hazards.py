"""Kernel-side state and environment hazards in the analysis: the real `kernel` artefact of
tests/fixtures/real/procfs with recorded process rows and stacks of demo jobs (recorded_shapes.py;
moved to a test's pid, or given a test's variables, by named transformations), in snapshots built
with analysis_builders. The kernel readings' variants (bytes written, a D-state thread returned, OOM
lines aged, /dev/shm filled) are the named transformations `transforms.kernel_*`."""

from __future__ import annotations

from pathlib import Path

from slime_hangdoctor.analysis.diagnosis import diagnose
from slime_hangdoctor.analysis.parts import environ, kernel
from slime_hangdoctor.analysis.readers import proxies as hazards
from slime_hangdoctor.analysis.source_analysis import Suspect
from slime_hangdoctor.analysis.world import World, build_world
from slime_hangdoctor.parsers.kernel import NodeKernel, parse_kernel
from slime_hangdoctor.source_spec import Observed
from slime_hangdoctor.verdict import Role
from tests.fixtures import transforms as tf
from tests.unit import analysis_builders as ab
from tests.unit import recorded_shapes as rs


def kernel_suspects(world: World) -> list[Suspect]:
    from slime_hangdoctor.analysis.parts import kernel as kernel_finder
    from slime_hangdoctor.analysis.source_analysis import Reads, assess

    return kernel_finder.suspects(Reads(world, assess(world)))


PROCFS = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "procfs"
REAL = parse_kernel((PROCFS / "kernel.json").read_text(encoding="utf-8"))
BLOCKED = next(p for p in REAL.processes if p.in_disk_sleep)  # the real D-state spawner


# A train rank's process row as recorded (demo fault checkpoint_slow_storage, rank 0 pid 12361,
# `ray::MegatronTrainRayActor.save_model`), moved to the pid of the real D-state reading.
SAVING_RANK = (rs.bundle("demo/checkpoint_slow_storage"), 12361)


def _rank_world(node0: NodeKernel, node1: NodeKernel) -> ab.Snapshot:
    rows = [rs.process(*SAVING_RANK, s, as_pid=BLOCKED.pid, ppid=1) for s in (0, 1)]
    return ab.snapshot(
        processes=(ab.procs_obs(0, rows[0]), ab.procs_obs(1, rows[1])),
        kernel=(Observed("kernel", ab.NODE, 0, node0), Observed("kernel", ab.NODE, 1, node1)),
    )


def _topo() -> ab.Topology:
    m = ab.member(Role.TRAIN_RANK, BLOCKED.pid, cls="MegatronTrainRayActor", rank=0)
    return ab.topology(m)


def test_disk_sleep_at_both_samples_with_no_bytes_moved_is_stuck_in_the_kernel() -> None:
    snap = _rank_world(REAL, REAL)
    world = build_world(snap, _topo())
    (read,) = [k for k in kernel.kernel_reads(world) if k.proc.pid == BLOCKED.pid]
    assert read.stuck_in_kernel and read.io_delta == 0
    (s,) = kernel_suspects(world)
    assert s.role is Role.TRAIN_RANK and s.source == "kernel" and "kernel_clone" in s.why
    rules = [f.rule for f in kernel.kernel_findings(world)]
    assert "stuck-in-kernel" in rules and "oom-killer" in rules


def test_bytes_written_between_the_samples_are_progress_not_stuck() -> None:
    later = tf.kernel_with_processes(
        REAL,
        tuple(
            tf.kernel_state_wrote(p, 64 << 20) if p.pid == BLOCKED.pid else p
            for p in REAL.processes
        ),
    )
    world = build_world(_rank_world(REAL, later), _topo())
    (read,) = [k for k in kernel.kernel_reads(world) if k.proc.pid == BLOCKED.pid]
    assert not read.stuck_in_kernel and read.written == 64 << 20
    assert kernel_suspects(world) == []
    (signal,) = kernel.progress(world).progress
    assert "64.0 MiB" in signal.message
    verdict = diagnose(_rank_world(REAL, later), _topo()).verdict
    assert verdict.status.value == "progressing", verdict.summary


def test_small_log_writes_are_not_progress() -> None:
    later = tf.kernel_with_processes(
        REAL,
        tuple(
            tf.kernel_state_unblocked(tf.kernel_state_wrote(p, 4096)) if p.pid == BLOCKED.pid else p
            for p in REAL.processes
        ),
    )
    world = build_world(_rank_world(REAL, later), _topo())
    assert kernel.progress(world).progress == ()


def test_old_oom_lines_are_left_out() -> None:
    assert REAL.log is not None and REAL.log.oom_lines
    old = tf.kernel_log_aged(REAL, 3 * 86400.0)
    world = build_world(_rank_world(REAL, old), _topo())
    assert kernel.oom_lines(world)  # sample 0 still has the recent ones
    world = build_world(_rank_world(old, old), _topo())
    assert kernel.oom_lines(world) == []


def test_nearly_full_shm_is_a_hazard() -> None:
    assert REAL.shm is not None and REAL.shm.free_bytes > 1 << 30  # as recorded: nearly empty
    full = tf.kernel_shm_filled(REAL, 200 << 20)
    world = build_world(_rank_world(REAL, full), _topo())
    (f,) = [f for f in kernel.kernel_findings(world) if f.rule == "shm-nearly-full"]
    assert f"200 MiB free of {REAL.shm.total_bytes / 2**30:.1f} GiB" in f.evidence[0]
    assert not [
        f
        for f in kernel.kernel_findings(build_world(_rank_world(REAL, REAL), _topo()))
        if f.rule == "shm-nearly-full"
    ]


def test_socket_interfaces_that_differ_across_ranks() -> None:
    """The process rows of three recorded train ranks (demo faults rollout_behind_proxy 4430 and
    4490, train_rank_stuck 5981), two of them with NCCL_SOCKET_IFNAME added to their recorded
    environment (`transforms.process_with_env`): eth0, ib0, unset."""
    proxy_job, stuck_job = (
        rs.bundle("demo/rollout_behind_proxy"),
        rs.bundle("demo/train_rank_stuck"),
    )
    a = tf.process_with_env(rs.process(proxy_job, 4430), {"NCCL_SOCKET_IFNAME": "eth0"})
    b_ = tf.process_with_env(rs.process(proxy_job, 4490), {"NCCL_SOCKET_IFNAME": "ib0"})
    c = rs.process(stuck_job, 5981)
    assert "NCCL_SOCKET_IFNAME" not in c.env
    snap = ab.snapshot(processes=(ab.procs_obs(0, a, b_, c),))
    topo = ab.topology(
        *(
            ab.member(Role.TRAIN_RANK, p, cls="MegatronTrainRayActor", rank=r)
            for r, p in enumerate((4430, 4490, 5981))
        )
    )
    (f,) = [
        f
        for f in environ.environ_findings(build_world(snap, topo), ())
        if f.rule == "socket-ifname-differs"
    ]
    assert "NCCL_SOCKET_IFNAME differs" in f.evidence[0] and "(unset)" in f.evidence[0]


def test_proxy_not_covering_the_engines_is_named_with_python_no_proxy_rule() -> None:
    """The RolloutManager's row of demo fault rollout_behind_proxy (pid 4307: http_proxy and
    HTTP_PROXY at the black-hole proxy 127.0.0.1:49671, no_proxy=localhost), and the same row with
    no_proxy naming the engine's host (`transforms.process_with_env`, moved to pid 22)."""
    url = "http://10.0.0.2:15000"
    proxy_job = rs.bundle("demo/rollout_behind_proxy")
    rm = rs.process(proxy_job, 4307)
    covered = {"no_proxy": "10.0.0.2", "NO_PROXY": "10.0.0.2"}
    ok = tf.process_with_env(rs.process(proxy_job, 4307, as_pid=22, ppid=rm.ppid), covered)
    topo = ab.topology(
        ab.member(Role.ROLLOUT_MANAGER, 4307, cls="RolloutManager"),
        ab.member(Role.ROLLOUT_MANAGER, 22, cls="RolloutManager"),
        engines=(ab.Engine(url, ab.NODE),),
    )
    snap = ab.snapshot(processes=(ab.procs_obs(0, rm, ok),))
    world = build_world(snap, topo)
    from slime_hangdoctor.analysis.readers.sglang_http import read_engines

    engines = read_engines(world)
    (h,) = hazards.proxy_hazards(world, engines)
    assert h.proc.pid == 4307 and h.through_proxy == (f"engine {url}",)
    assert h.variable.lower() == "http_proxy"
    assert "127.0.0.1:49671" in h.describe()


# demo fault checkpoint_slow_storage: the driver (12192) in `ray.get` of `save_model`, train rank 0
# (12361) writing its shard (`_write_block` under slime's `save_checkpoint`). Both ranks of this
# world write: rank 0's recorded stack moved to pids 300 and 301 (rank 1 of that recording had
# finished its shard and waits in the barrier; its process row is kept for pid 301), the driver
# moved to 100.
CHECKPOINT = rs.bundle("demo/checkpoint_slow_storage")
CHECKPOINT_STACKS = {12192: 100, 12361: 300}
CHECKPOINT_ROWS = {12192: 100, 12361: 300, 12417: 301}


def _checkpoint_members() -> ab.Topology:
    return ab.topology(
        ab.member(Role.DRIVER, 100, "driver"),
        *(
            ab.member(
                Role.TRAIN_RANK, pid, cls="MegatronTrainRayActor", method="save_model", rank=r
            )
            for r, pid in enumerate((300, 301))
        ),
    )


def _checkpoint_world(moved: int) -> ab.Snapshot:
    """The recorded checkpoint save above, with the real D-state reading as both ranks' kernel
    state at both samples, `moved` bytes written in between."""
    stacks = tuple(
        rs.stack(CHECKPOINT, pid, s, as_pid=as_pid)
        for s in (0, 1)
        for pid, as_pid in (*CHECKPOINT_STACKS.items(), (12361, 301))
    )
    infos = tuple(
        ab.procs_obs(
            s,
            *(
                rs.process(CHECKPOINT, pid, s, as_pid=as_pid, ppid=1)
                for pid, as_pid in CHECKPOINT_ROWS.items()
            ),
        )
        for s in (0, 1)
    )

    def node(extra: int) -> NodeKernel:
        blocked = tf.kernel_state_wrote(BLOCKED, extra)
        return tf.kernel_with_processes(  # type: ignore[no-any-return]
            REAL, tuple(tf.kernel_state_relabelled(blocked, pid=pid) for pid in (300, 301))
        )

    return ab.snapshot(
        stacks=stacks,
        processes=infos,
        jobs=(ab.running_job(),),
        kernel=(
            Observed("kernel", ab.NODE, 0, node(0)),
            Observed("kernel", ab.NODE, 1, node(moved)),
        ),
    )


def test_checkpoint_in_d_state_with_no_bytes_moved_is_stuck_storage() -> None:
    v = diagnose(_checkpoint_world(0), _checkpoint_members()).verdict
    assert v.status.value == "hung" and v.stage.value == "checkpoint", v.summary
    (f,) = [f for f in v.findings if f.rule == "checkpoint-stall"]
    assert "stuck storage" in f.message
    assert any("kernel_clone" in e and "0.0 MiB" in e for e in f.evidence)


def test_checkpoint_writing_slowly_is_not_called_stuck() -> None:
    v = diagnose(_checkpoint_world(8192), _checkpoint_members()).verdict
    (f,) = [f for f in v.findings if f.rule == "checkpoint-stall"]
    assert "slow storage, not stuck" in f.message
    fast = diagnose(_checkpoint_world(256 << 20), _checkpoint_members()).verdict
    assert fast.status.value == "progressing", fast.summary  # 256 MiB in the window: it writes
