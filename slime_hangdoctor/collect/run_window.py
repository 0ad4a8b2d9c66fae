"""The two samples of a run and the window between them.

The first sample; from the end of this node's part of it, what needs nothing of the second
sample (the window probes: the job's logs; the pre-parse of the first sample's artefacts; the
caller's `on_window`); the wait; the second sample; and what ends with it (the flight recorders'
dumps when asked, the other nodes' GPU readings over the window)."""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass

from slime_hangdoctor import bundle as bundle_format
from slime_hangdoctor.bundle import Bundle, BundleWriter, ProbeRecord
from slime_hangdoctor.collect.node import parse_cache, partial_snapshot, window_probes
from slime_hangdoctor.collect.node_probe import WindowContext
from slime_hangdoctor.collect.options import Deadline
from slime_hangdoctor.collect.remote import gather_remote
from slime_hangdoctor.collect.run_context import Background, ProgressFn, RunContext
from slime_hangdoctor.collect.run_sample import sample
from slime_hangdoctor.load import load_snapshot
from slime_hangdoctor.outcome import Outcome
from slime_hangdoctor.topology import MemberKind, Topology
from slime_hangdoctor.verdict import Role


@dataclass(frozen=True)
class WindowResult:
    """What the two samples leave to the run's result."""

    # With `stacks_only_if_stalled`: did anything that moves only with work move between the two
    # samples (None: not asked).
    work_moved: bool | None
    node_ip: str | None  # this collector's Ray node, where it knows it


def two_samples(
    ctx: RunContext,
    background: Background,
    *,
    on_window: Callable[[], None] | None = None,
    judge_work_moved: Callable[[BundleWriter], bool] | None = None,
) -> WindowResult:
    """The first sample, the window, the second sample, and what ends with it."""
    opts, deadline = ctx.opts, ctx.deadline
    t0 = time.monotonic()

    def window_begins() -> None:
        _window_begins(ctx, background, on_window)

    first = sample(ctx, background, None, on_local_done=window_begins)
    ctx = dataclasses.replace(ctx, here=first.here)
    _sleep_until(t0 + opts.window_s, deadline, ctx.say)
    second = sample(ctx, background, first, judge_work_moved=judge_work_moved)
    if opts.flight_recorder:
        ctx.say("asking the ranks' flight recorders to dump")
        _flight_recorder(ctx, second.topo)
    background.join(deadline, opts.probe_timeout_s + opts.window_s)
    if background.tasks is not None and first.remote_gpu:
        gather_remote(
            background.tasks,
            ctx.writer,
            first.remote_gpu,
            None,
            deadline,
            opts.probe_timeout_s + 2.0,
        )
    return WindowResult(second.work_moved, first.here.node_ip)


def _window_begins(
    ctx: RunContext, background: Background, on_window: Callable[[], None] | None
) -> None:
    """What needs nothing of the second sample starts as soon as this node's first sample is
    taken (other nodes' answers may still be on their way): the logs' tails (the dashboard and
    Ray's agents are idle in the window, so they do not slow the second sample's dumps), the
    parse of the first sample's artefacts, and the caller's `on_window` (the analysis's and the
    renderer's imports). Called once, by the first sample."""
    _start_window_probes(ctx, background)
    _start_preparse(ctx.writer, background)
    if on_window is not None:
        on_window()


def _start_window_probes(ctx: RunContext, background: Background) -> None:
    """Start every source's window probe (collect.node.window_probes: the job's logs), from the
    end of the first sample, while the window passes; their threads are joined with the others
    before the bundle is finished."""
    if ctx.client is None or ctx.deadline.expired:
        return
    window = WindowContext(ctx.writer, ctx.client, ctx.opts, ctx.deadline, ctx.say)
    for _, probe in window_probes():
        thread = probe(window)
        if thread is not None:
            background.add(thread)


def _start_preparse(writer: BundleWriter, background: Background) -> None:
    """Parse what the writer holds (the first sample) in a thread, into the writer's parse cache:
    the analysis then parses the second sample's artefacts only."""

    def preparse() -> None:
        try:
            with Bundle(writer.root, writer.manifest()) as view:
                load_snapshot(view, parse_cache(writer))
        except Exception:  # noqa: BLE001 - a head start only: the analysis parses what is missing
            return

    background.start(preparse, "preparse")


def _flight_recorder(ctx: RunContext, topo: Topology) -> None:
    from slime_hangdoctor.collect.flight_recorder import dump_flight_recorder, find_fr_targets

    writer, opts, deadline = ctx.writer, ctx.opts, ctx.deadline
    snap = partial_snapshot(writer)
    envs = {p.pid: p.env for p in (snap.processes_at(1) or snap.processes_at(0))}
    targets = []
    for m in topo.members:
        if m.node_ip not in (None, ctx.node_ip):
            continue
        if m.role is Role.TRAIN_RANK or m.kind is MemberKind.SCHEDULER:
            target = find_fr_targets(envs.get(m.pid, {}), m.pid)
            if target is not None:
                targets.append(target)
    if not targets:
        writer.add(
            ProbeRecord(
                bundle_format.FLIGHT_RECORDER,
                "all",
                Outcome.UNAVAILABLE,
                "no process on this node has TORCH_NCCL_DEBUG_INFO_PIPE_FILE and TORCH_FR_DUMP_TEMP_FILE set",
                node_ip=ctx.node_ip,
                started_at=time.time(),
            )
        )
        return
    with cf.ThreadPoolExecutor(max_workers=max(1, min(8, len(targets)))) as pool:
        futures = [
            pool.submit(
                dump_flight_recorder,
                writer,
                t,
                node_ip=ctx.node_ip,
                timeout=deadline.clamp(max(10.0, opts.probe_timeout_s)),
            )
            for t in targets
        ]
        cf.wait(futures, timeout=deadline.clamp(12.0))


def _sleep_until(when: float, deadline: Deadline, say: ProgressFn) -> None:
    left = min(when - time.monotonic(), deadline.remaining() - 0.5)
    if left > 0:
        say(f"waiting {left:.1f}s to see whether anything moves")
        time.sleep(left)
