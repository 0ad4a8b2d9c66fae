"""One sample of a run: Ray state; this node and every other slime node; then engines and routers.

Each sample returns what it found (`SampleResult`); the second sample reads the first's."""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from slime_hangdoctor.bundle import BundleWriter
from slime_hangdoctor.collect.node import (
    partial_snapshot,
    pending_actors,
    pids_by_node,
    sample_gpus_over,
    sample_node,
    submit_stacks,
)
from slime_hangdoctor.collect.node_probe import NodeContext, NodeSpec
from slime_hangdoctor.collect.remote import (
    RemoteNode,
    Started,
    gather_remote,
    sample_budget,
    short_window_spots,
)
from slime_hangdoctor.collect.run_connect import cluster_scope, locate
from slime_hangdoctor.collect.run_context import (
    Background,
    Here,
    RunContext,
    local_spec_off,
    read_before,
)
from slime_hangdoctor.collect.run_dashboard import read_cluster
from slime_hangdoctor.collect.run_endpoints import EndpointProbes, start_early_endpoints
from slime_hangdoctor.collect.run_remote import (
    Remote,
    note_lost_nodes,
    remote_nodes,
    start_remote_samples,
    traceback_fallback,
)
from slime_hangdoctor.parsers.pyspy import PYSPY
from slime_hangdoctor.parsers.ray_state import JOB_RUNNING, RAY_STATE
from slime_hangdoctor.snapshot import Snapshot
from slime_hangdoctor.topology import Topology, build_topology

# How long the second sample waits for the first sample's other nodes, at most, before its own
FIRST_REST_WAIT_S = 0.5


@dataclass(frozen=True)
class SampleResult:
    """What one sample found: the topology (the first sample's, of this node and the other
    nodes that answered before it returned), where this collector stands, the other slime nodes
    it asked, and, of the first sample only, the other nodes' GPU readings over the window and
    the rest of its topology (every node's, gathered in the window: `rest`)."""

    index: int
    topo: Topology
    here: Here
    remote: tuple[RemoteNode, ...]
    remote_gpu: Started
    rest: cf.Future[Topology] | None = None
    # with `stacks_only_if_stalled`, at the second sample: the judge's answer (None: not asked)
    work_moved: bool | None = None

    def last_topology(self) -> Topology:
        """The first sample's every-node topology where its rest is in, else its own."""
        rest = self.rest
        if rest is not None and rest.done() and rest.exception() is None:
            return rest.result()
        return self.topo


def sample(
    ctx: RunContext,
    background: Background,
    last: SampleResult | None,
    *,
    on_local_done: Callable[[], None] = lambda: None,
    judge_work_moved: Callable[[BundleWriter], bool] | None = None,
) -> SampleResult:
    """The first sample (`last` None) or the second. At the second, the stacks of this node's
    processes that the first sample found are dumped from its start, while Ray's state is read
    and the processes scanned again (the scan then dumps only the processes new since).
    `on_local_done`: called once this node's first sample is taken (the window begins)."""
    index = 0 if last is None else 1
    ctx.writer.note_sample(index, time.time())
    # first: the longest probes of a sample
    probes = start_early_endpoints(ctx, index, last.last_topology() if last else None)
    early = _early_stacks(ctx, last)
    read_cluster(ctx, background, index)
    state = partial_snapshot(ctx.writer)
    if last is None:
        ctx = dataclasses.replace(ctx, here=locate(ctx, state))
        probes = EndpointProbes(ctx, index)  # (none started early at the first sample)
        background.add(_start_gpu_sampling(ctx))
    elif last.rest is not None:
        # the first sample's other nodes, if they are still on their way (briefly: a node that
        # outlasts the window is gathered beside this sample, not before it)
        cf.wait([last.rest], timeout=ctx.deadline.clamp(FIRST_REST_WAIT_S))
    remote = remote_nodes(ctx, state)
    if last is not None:
        note_lost_nodes(ctx, last.remote, remote)
    started, remote_gpu = start_remote_samples(ctx, background, remote, index)
    local_spec = dataclasses.replace(
        _local_spec(ctx, state, index),
        started=((PYSPY, frozenset(early)),) if early else (),
    )
    here = _Here(ctx, background, local_spec, probes, on_local_done)
    topo, rest = here.sample(started, remote)
    cf.wait(list(early.values()), timeout=ctx.deadline.clamp(ctx.opts.probe_timeout_s * 2 + 1.0))
    work_moved = None
    if index == 1 and ctx.opts.stacks_only_if_stalled:
        work_moved = _stacks_if_stalled(ctx, topo, local_spec, judge_work_moved)
    nodes = tuple(node for node, _ in remote)
    return SampleResult(index, topo, ctx.here, nodes, remote_gpu, rest, work_moved)


def _early_stacks(ctx: RunContext, last: SampleResult | None) -> dict[int, cf.Future[Any]]:
    """pid -> its dump, for this node's processes of the last sample's topology, started now
    (the second sample of a run that takes stacks at both)."""
    if last is None or PYSPY in local_spec_off(ctx.opts, 1):
        return {}
    from slime_hangdoctor.collect.pyspy import NODE_PROBE

    spec = NodeSpec(ctx.node_ip, 1)
    here = NodeContext(ctx.writer, last.topo, spec, ctx.opts, ctx.deadline, ctx.pool).members()
    # still there (a process gone since is the scan's to find, not a failed dump)
    alive = tuple(m for m in here if os.path.exists(f"/proc/{m.pid}"))
    topo = dataclasses.replace(last.topo, members=alive)
    node_ctx = NodeContext(ctx.writer, topo, spec, ctx.opts, ctx.deadline, ctx.pool)
    return dict(zip([m.pid for m in alive], NODE_PROBE(node_ctx), strict=True))


class _Here:
    """This node's sample, the other nodes' results, and the engines and routers of all of them.

    Engines and routers are probed as soon as the process scan has found them, while the stacks
    are dumped (a stuck scheduler holds /server_info for 2 s: that wait overlaps the dumps); those
    only known once the other nodes have answered are probed after that (`probes`: those
    started already, which it adds to)."""

    def __init__(
        self,
        ctx: RunContext,
        background: Background,
        spec: NodeSpec,
        probes: EndpointProbes,
        on_local_done: Callable[[], None],
    ) -> None:
        self.ctx, self.background, self.spec = ctx, background, spec
        self.probes, self.on_local_done = probes, on_local_done

    def sample(
        self, started: Started, remote: Remote
    ) -> tuple[Topology, cf.Future[Topology] | None]:
        ctx, index = self.ctx, self.spec.sample
        ctx.say(f"sample {index + 1}/2: processes and stacks")
        sample_node(
            ctx.writer, self.spec, ctx.opts, ctx.deadline, ctx.pool, on_scan=self.probes.found
        )
        if index == 0:
            self.on_local_done()  # the other nodes' first samples may still take a while
        if not (index == 0 and started):
            return self.rest(started), None
        # The other nodes' first samples (their probes start a worker: a second or two), and the
        # engines only they know of, are gathered while the window passes: they end the first
        # sample only where they outlast the window (the second sample waits for them briefly).
        future: cf.Future[Topology] = cf.Future()

        def rest_of_first() -> None:
            try:
                future.set_result(self.rest(started))
            except BaseException as exc:
                future.set_exception(exc)
                raise

        self.background.start(rest_of_first, "first-sample-rest")
        return build_topology(partial_snapshot(ctx.writer)), future

    def rest(self, started: Started) -> Topology:
        ctx, index, probes = self.ctx, self.spec.sample, self.probes
        tasks = self.background.tasks
        if started and tasks is not None:
            # a sample's time, and the first sample's waits in the window, where a node's probe
            # may take the time its worker needs to start, over a loaded raylet; a node whose
            # first sample came that late takes its second a window after it (NodeProbe), which
            # the second sample's wait allows it (window_s)
            window = ctx.opts.window_s
            wait = sample_budget(ctx.opts) + 1.0 + (window if index == 0 else 0.0)
            failed = gather_remote(
                tasks, ctx.writer, started, index, ctx.deadline, wait, window_s=window
            )
            traceback_fallback(ctx, failed, index)
            if index > 0:
                short_window_spots(ctx.writer, [c.node for c in started], ctx.opts.window_s)
        topo = build_topology(partial_snapshot(ctx.writer))
        probes.start(topo)
        if probes.futures:
            ctx.say(f"sample {index + 1}/2: {len(probes.futures)} engines and routers")
            probes.wait()
            # engines only the router's worker list names (a server that is gone listens nowhere)
            first = len(probes.futures)
            topo = build_topology(partial_snapshot(ctx.writer))
            if probes.start(topo):
                ctx.say(
                    f"sample {index + 1}/2: {len(probes.futures) - first} engines the router lists"
                )
                probes.wait(first)
        return topo


def _stacks_if_stalled(
    ctx: RunContext,
    topo: Topology,
    local_spec: NodeSpec,
    judge_work_moved: Callable[[BundleWriter], bool] | None,
) -> bool | None:
    """The watchdog's mode: the second set of stacks only when its judge says no work moved.
    Returns the judge's answer (None where no judge was given)."""
    work_moved = judge_work_moved(ctx.writer) if judge_work_moved is not None else None
    if ctx.opts.stacks and not work_moved:
        ctx.say(f"{'nothing moved: ' if work_moved is False else ''}taking the stacks again")
        dumps = submit_stacks(ctx.writer, topo, local_spec, ctx.opts, ctx.deadline, ctx.pool)
        cf.wait(dumps, timeout=ctx.deadline.clamp(ctx.opts.probe_timeout_s * 2 + 1.0))
    return work_moved


def _local_spec(ctx: RunContext, state: Snapshot, index: int) -> NodeSpec:
    return NodeSpec(
        ctx.node_ip,
        index,
        roots=_local_roots(ctx, state),
        extra_pids=frozenset(_local_drivers(ctx, state)),
        pending=pending_actors(state),
        off=local_spec_off(ctx.opts, index),
        read_before=read_before(ctx.writer, ctx.node_ip),
        cluster=cluster_scope(ctx),
    )


def _local_roots(ctx: RunContext, state: Snapshot) -> frozenset[int] | None:
    """With Ray state: the worker pids Ray places on this node; without it: None (find by titles)."""
    node_id = ctx.here.node_id
    if ctx.client is None or not state.joined(RAY_STATE).seen or node_id is None:
        return None
    return frozenset(pids_by_node(state).get(node_id, set()))


def _local_drivers(ctx: RunContext, state: Snapshot) -> set[int]:
    return {
        j.driver_pid
        for j in state.joined(RAY_STATE).jobs
        if j.status == JOB_RUNNING
        and j.driver_pid
        and (j.driver_node_ip in (None, ctx.node_ip) or j.driver_node_ip in ctx.local_ips)
    }


def _start_gpu_sampling(ctx: RunContext) -> threading.Thread:
    """This node's GPUs, read until the second sample is due (not a window after this start)."""
    left = ctx.window_end - time.time()
    thread = threading.Thread(
        target=sample_gpus_over,
        args=(ctx.writer, ctx.node_ip, ctx.opts, ctx.deadline, time.monotonic() + left),
        name="nvml-sampler",
        daemon=True,
    )
    thread.start()
    return thread
