"""Kernel-side state and environment hazards in the analysis: constructed snapshots (see
analysis_builders) around the real `kernel` artefact of tests/fixtures/real/procfs."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from slime_hangdoctor.analysis import hazards, kernel
from slime_hangdoctor.analysis.diagnosis import diagnose
from slime_hangdoctor.analysis.suspects.suspect import Suspect
from slime_hangdoctor.analysis.world import World, build_world
from slime_hangdoctor.facts import NodeKernel, ShmSpace
from slime_hangdoctor.parsers.kernel import parse_kernel
from slime_hangdoctor.snapshot import KernelObs
from slime_hangdoctor.verdict import Role
from tests.unit import analysis_builders as ab
from tests.unit import recorded_shapes as rs


def kernel_suspects(world: World) -> list[Suspect]:
    from slime_hangdoctor.analysis.engines import read_engines
    from slime_hangdoctor.analysis.progress import assess
    from slime_hangdoctor.analysis.suspects import kernel as kernel_finder
    from slime_hangdoctor.analysis.suspects import reads_of

    engines = read_engines(world)
    return kernel_finder.suspects(reads_of(world, engines, assess(world, engines)))


PROCFS = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "procfs"
REAL = parse_kernel((PROCFS / "kernel.json").read_text(encoding="utf-8"))
BLOCKED = next(p for p in REAL.processes if p.in_disk_sleep)  # the real D-state spawner


def _rank_world(node0: NodeKernel, node1: NodeKernel, **env: str) -> ab.Snapshot:
    pid = BLOCKED.pid
    info = ab.proc(pid, "ray::MegatronTrainRayActor.save_model", cpu=1.0, env={"RANK": "0", **env})
    return ab.snapshot(
        processes=(ab.procs_obs(0, info), ab.procs_obs(1, info)),
        kernel=(KernelObs(ab.NODE, 0, node0), KernelObs(ab.NODE, 1, node1)),
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
    io = BLOCKED.io
    assert io is not None
    wrote = dataclasses.replace(io, write_bytes=io.write_bytes + (64 << 20))
    later = dataclasses.replace(
        REAL,
        processes=tuple(
            dataclasses.replace(p, io=wrote) if p.pid == BLOCKED.pid else p for p in REAL.processes
        ),
    )
    world = build_world(_rank_world(REAL, later), _topo())
    (read,) = [k for k in kernel.kernel_reads(world) if k.proc.pid == BLOCKED.pid]
    assert not read.stuck_in_kernel and read.written == 64 << 20
    assert kernel_suspects(world) == []
    (signal,) = kernel.io_signals(world)
    assert "64.0 MiB" in signal.message
    verdict = diagnose(_rank_world(REAL, later), _topo()).verdict
    assert verdict.status.value == "progressing", verdict.summary


def test_small_log_writes_are_not_progress() -> None:
    io = BLOCKED.io
    assert io is not None
    wrote = dataclasses.replace(io, write_bytes=io.write_bytes + 4096)
    later = dataclasses.replace(
        REAL,
        processes=tuple(
            dataclasses.replace(p, io=wrote, blocked_threads=()) for p in REAL.processes
        ),
    )
    world = build_world(_rank_world(REAL, later), _topo())
    assert kernel.io_signals(world) == []


def test_old_oom_lines_are_left_out() -> None:
    assert REAL.log is not None
    old = dataclasses.replace(
        REAL.log,
        oom_lines=tuple(dataclasses.replace(x, age_s=3 * 86400.0) for x in REAL.log.oom_lines),
    )
    world = build_world(_rank_world(REAL, dataclasses.replace(REAL, log=old)), _topo())
    assert kernel.oom_lines(world)  # sample 0 still has the recent ones
    world = build_world(
        _rank_world(dataclasses.replace(REAL, log=old), dataclasses.replace(REAL, log=old)),
        _topo(),
    )
    assert kernel.oom_lines(world) == []


def test_nearly_full_shm_is_a_hazard() -> None:
    full = dataclasses.replace(REAL, shm=ShmSpace("/dev/shm", 64 << 30, 200 << 20))
    world = build_world(_rank_world(REAL, full), _topo())
    (f,) = [f for f in hazards.hazard_findings(world, ()) if f.rule == "shm-nearly-full"]
    assert "200 MiB free of 64.0 GiB" in f.evidence[0]
    assert not [
        f
        for f in hazards.hazard_findings(build_world(_rank_world(REAL, REAL), _topo()), ())
        if f.rule == "shm-nearly-full"
    ]


def test_socket_interfaces_that_differ_across_ranks() -> None:
    a = ab.proc(
        11, "ray::MegatronTrainRayActor.train", env={"RANK": "0", "NCCL_SOCKET_IFNAME": "eth0"}
    )
    b_ = ab.proc(
        12, "ray::MegatronTrainRayActor.train", env={"RANK": "1", "NCCL_SOCKET_IFNAME": "ib0"}
    )
    c = ab.proc(13, "ray::MegatronTrainRayActor.train", env={"RANK": "2"})
    snap = ab.snapshot(processes=(ab.procs_obs(0, a, b_, c),))
    topo = ab.topology(
        *(
            ab.member(Role.TRAIN_RANK, p, cls="MegatronTrainRayActor", rank=r)
            for r, p in enumerate((11, 12, 13))
        )
    )
    (f,) = [
        f
        for f in hazards.hazard_findings(build_world(snap, topo), ())
        if f.rule == "socket-ifname-differs"
    ]
    assert "NCCL_SOCKET_IFNAME differs" in f.evidence[0] and "(unset)" in f.evidence[0]


def test_proxy_not_covering_the_engines_is_named_with_python_no_proxy_rule() -> None:
    url = "http://10.0.0.2:15000"
    rm_env = {"HTTP_PROXY": "http://<redacted>@proxy.corp:3128", "no_proxy": "localhost,.corp"}
    rm = ab.proc(21, "ray::RolloutManager.generate", env=rm_env)
    ok = ab.proc(22, "ray::RolloutManager.generate", env={**rm_env, "no_proxy": "10.0.0.2"})
    topo = ab.topology(
        ab.member(Role.ROLLOUT_MANAGER, 21, cls="RolloutManager"),
        ab.member(Role.ROLLOUT_MANAGER, 22, cls="RolloutManager"),
        engines=(ab.Engine(url, ab.NODE),),
    )
    snap = ab.snapshot(processes=(ab.procs_obs(0, rm, ok),))
    world = build_world(snap, topo)
    from slime_hangdoctor.analysis.engines import read_engines

    engines = read_engines(world)
    (h,) = hazards.proxy_hazards(world, engines)
    assert h.proc.pid == 21 and h.variable == "HTTP_PROXY" and h.through_proxy == (f"engine {url}",)
    assert "<redacted>" in h.describe()


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
    io = BLOCKED.io
    assert io is not None

    def node(extra: int) -> NodeKernel:
        wrote = dataclasses.replace(io, write_bytes=io.write_bytes + extra)
        return NodeKernel(
            tuple(dataclasses.replace(BLOCKED, pid=pid, io=wrote) for pid in (300, 301)),
            REAL.shm,
            log=REAL.log,
        )

    return ab.snapshot(
        stacks=stacks,
        processes=infos,
        jobs=(ab.running_job(),),
        kernel=(KernelObs(ab.NODE, 0, node(0)), KernelObs(ab.NODE, 1, node(moved))),
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
