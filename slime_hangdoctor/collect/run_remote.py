"""The other nodes of a sample: which host slime actors, asking their probes through the run's Ray
driver, the nodes lost between the samples, and the dashboard's stacks where a node's task failed."""

from __future__ import annotations

from slime_hangdoctor.collect.node import partial_snapshot, pids_by_node
from slime_hangdoctor.collect.node_probe import NodeSpec
from slime_hangdoctor.collect.options import resolve_token
from slime_hangdoctor.collect.remote import (
    RayTasks,
    RemoteNode,
    Started,
    collect_remote,
    node_blind_spot,
)
from slime_hangdoctor.collect.run_context import Background, RunContext, read_before, sources_off
from slime_hangdoctor.parsers.ray_state import ACTOR_ALIVE, NODE_ALIVE, RAY_STATE
from slime_hangdoctor.snapshot import Snapshot
from slime_hangdoctor.topology import CLASS_ROLES

# The other slime nodes of a sample, each with the pids of its workers
Remote = tuple[tuple[RemoteNode, frozenset[int]], ...]


def _slime_nodes(state: Snapshot) -> dict[str, set[int]]:
    """node id -> pids of its workers, for nodes that host a slime actor."""
    by_node = pids_by_node(state)
    slime = {
        a.node_id
        for a in state.joined(RAY_STATE).actors
        if a.class_name in CLASS_ROLES and a.state == ACTOR_ALIVE and a.node_id
    }
    return {n: pids for n, pids in by_node.items() if n in slime}


def remote_nodes(ctx: RunContext, state: Snapshot) -> Remote:
    """The alive nodes other than this one that host a slime actor (none without a cluster)."""
    if ctx.client is None:
        return ()
    ips = {n.node_id: n.node_ip for n in state.joined(RAY_STATE).nodes if n.state == NODE_ALIVE}
    return tuple(
        (RemoteNode(node_id, ips[node_id]), frozenset(pids))
        for node_id, pids in sorted(_slime_nodes(state).items())
        if node_id != ctx.here.node_id and node_id in ips
    )


def note_lost_nodes(ctx: RunContext, first: tuple[RemoteNode, ...], remote: Remote) -> None:
    """A node that hosted slime actors at the first sample and is gone at the second: a blind spot."""
    alive = {node.node_id for node, _ in remote}
    for node in first:
        if node.node_id not in alive:
            node_blind_spot(
                ctx.writer,
                node,
                1,
                "the node hosted slime actors at the first sample and is no longer alive",
            )


def start_remote_samples(
    ctx: RunContext, background: Background, remote: Remote, index: int
) -> tuple[Started, Started]:
    """Ask every other slime node's probe for its sample (and, at sample 0, its GPU readings
    until the window's end), without waiting: the calls go out as soon as the Ray driver is
    connected (its connection starts here, at the first sample), while this node is sampled.
    Returns (the sample's calls, the GPU readings' calls)."""
    if not remote:
        return [], []
    opts, deadline = ctx.opts, ctx.deadline

    def start_driver() -> RayTasks:
        ctx.say(f"connecting to Ray to reach {len(remote)} other node(s)")
        # (the token only where it may go to this GCS: address.Cluster.token_ok)
        token = resolve_token(opts.ray_token) if ctx.token_ok else None
        return RayTasks(ctx.here.gcs_address, timeout_s=deadline.remaining(), token=token)

    tasks = background.open_tasks(start_driver)
    specs = [
        (
            node,
            NodeSpec(
                node.node_ip,
                index,
                pids,
                off=sources_off(opts),
                read_before=read_before(ctx.writer, node.node_ip),
            ),
        )
        for node, pids in remote
    ]
    started = collect_remote(tasks, specs, opts, deadline)
    if index != 0:
        return started, []
    gpu_specs = [(node, NodeSpec(node.node_ip, 0)) for node, _ in remote]
    gpus = collect_remote(
        tasks,
        gpu_specs,
        opts,
        deadline,
        gpus=True,
        budget_s=deadline.clamp(opts.window_s + 3.0),
        until=ctx.window_end,
    )
    return started, gpus


def traceback_fallback(ctx: RunContext, failed: list[RemoteNode], index: int) -> None:
    """Stacks of a node whose Ray task failed, through the dashboard's /worker/traceback (if allowed)."""
    client = ctx.client
    if not failed or client is None:
        return
    from slime_hangdoctor.collect.dashboard import worker_traceback

    state = partial_snapshot(ctx.writer)
    for node in failed:
        for a in state.joined(RAY_STATE).actors:
            if (
                a.node_id == node.node_id
                and a.class_name in CLASS_ROLES
                and a.pid
                and a.state == ACTOR_ALIVE
            ):
                worker_traceback(
                    ctx.writer,
                    client,
                    pid=a.pid,
                    node_ip=node.node_ip,
                    sample=index,
                    timeout=ctx.deadline.clamp(ctx.opts.probe_timeout_s),
                )
