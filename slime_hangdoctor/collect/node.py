"""Node-local collection: what can only be read on the node where a process lives.

`sample_node` takes one sample of one node (its slime processes, their py-spy stacks, NCCL RAS) into a
bundle writer. The CLI runs it in-process for its own node and, through `collect.remote`, as a Ray task
pinned to every other node that hosts slime processes.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slime_hangdoctor import bundle as b
from slime_hangdoctor.bundle import Bundle, BundleWriter, ProbeRecord
from slime_hangdoctor.collect.options import CollectOptions, Deadline
from slime_hangdoctor.load import load_snapshot
from slime_hangdoctor.parsers.ray_state import TASK_HISTORY
from slime_hangdoctor.snapshot import Snapshot
from slime_hangdoctor.topology import Topology, build_topology
from slime_hangdoctor.verdict import Role


@dataclass(frozen=True)
class NodeSpec:
    """What one node-local sample needs to know; plain data so it travels to a Ray task."""

    node_ip: str | None
    sample: int
    roots: frozenset[int] | None = None  # Ray worker pids of this node; None = find by titles
    extra_pids: frozenset[int] = frozenset()  # job drivers on this node
    # (pid, class) of the job's actors that Ray lists with a pid and no node yet (an actor in its
    # constructor: PENDING_CREATION); scanned where that pid carries the actor's `ray::` title
    pending: frozenset[tuple[int, str]] = frozenset()
    stacks: bool = True
    ras: bool = True
    procfs: bool = True  # TCP connections and kernel-side state of the slime processes
    # the heads of the worker logs of engine actors with no serving child (collect/log_heads.py),
    # except those of `heads_read` (pids whose heads this run has read already)
    log_heads: bool = True
    heads_read: frozenset[int] = frozenset()


# What discovery reads (build_topology, and collect.run's node, driver and actor look-ups): Ray
# state, the process tables, the routers' engine lists and the engine actors' log heads (the URL
# of a server that is gone). Stacks, engine answers, GPU and RAS records and the task history (up to
# ray_state.TASK_LIMIT rows per job) are parsed once, by the analysis: re-parsing them at every
# discovery step cost more with every sample and every target.
DISCOVERY_SOURCES = frozenset({b.RAY_DASHBOARD, b.PROCESSES, b.ROUTER, b.ACTOR_LOG_HEAD})


def partial_snapshot(writer: BundleWriter) -> Snapshot:
    """Parse what discovery needs of what the writer holds so far (DISCOVERY_SOURCES)."""
    manifest = writer.manifest()
    probes = tuple(
        p
        for p in manifest.probes
        if p.source in DISCOVERY_SOURCES and not p.target.startswith(TASK_HISTORY.target)
    )
    with Bundle(writer.root, dataclasses.replace(manifest, probes=probes)) as view:
        return load_snapshot(view)


def sample_node(
    writer: BundleWriter,
    spec: NodeSpec,
    opts: CollectOptions,
    deadline: Deadline,
    pool: cf.ThreadPoolExecutor,
    on_scan: Callable[[Topology], None] | None = None,
) -> Topology:
    """One sample of this node: processes, then stacks of its slime processes and RAS, concurrently.

    `on_scan` gets the topology found by the process scan before the stacks are dumped (the CLI
    starts its engine probes there, so that they run while the stacks are dumped)."""
    from slime_hangdoctor.collect.processes import local_uid_choice, record_processes

    # found by titles: one user's processes only (a root doctor takes no one else's)
    uid, note = local_uid_choice(opts.uid) if spec.roots is None else (None, None)
    record_processes(
        writer,
        node_ip=spec.node_ip,
        sample=spec.sample,
        extra_pids=spec.extra_pids,
        pending=spec.pending,
        roots=spec.roots,
        uid=uid,
        note=note,
    )
    topo = build_topology(partial_snapshot(writer))
    if on_scan is not None:
        on_scan(topo)
    jobs: list[cf.Future[Any]] = []
    for probe in NODE_PROBES:
        jobs.extend(probe(writer, topo, spec, opts, deadline, pool))
    cf.wait(jobs, timeout=deadline.clamp(opts.probe_timeout_s * 2 + 1.0))
    return topo


def _submit_stacks(
    writer: BundleWriter,
    topo: Topology,
    spec: NodeSpec,
    opts: CollectOptions,
    deadline: Deadline,
    pool: cf.ThreadPoolExecutor,
) -> list[cf.Future[Any]]:
    return submit_stacks(writer, topo, spec, opts, deadline, pool) if spec.stacks else []


def _submit_ras(
    writer: BundleWriter,
    topo: Topology,
    spec: NodeSpec,
    opts: CollectOptions,
    deadline: Deadline,
    pool: cf.ThreadPoolExecutor,
) -> list[cf.Future[Any]]:
    return [pool.submit(_ras, writer, spec, opts, deadline)] if spec.ras else []


# A node-local probe: given the slime processes the scan found on this node, start its probes on
# the pool (each ends as a ProbeRecord in the writer; never raises) and return their futures.
NodeProbe = Callable[
    [BundleWriter, Topology, NodeSpec, CollectOptions, Deadline, cf.ThreadPoolExecutor],
    list[cf.Future[Any]],
]


# The registry of node-local probes, run after the process scan of each sample on every slime node
# (this one in-process, the others in a Ray task pinned to the node): a new node-local source adds
# one line here (and, if it may be turned off, a flag in NodeSpec / CollectOptions).
def _submit_procfs(
    writer: BundleWriter,
    topo: Topology,
    spec: NodeSpec,
    opts: CollectOptions,
    deadline: Deadline,
    pool: cf.ThreadPoolExecutor,
) -> list[cf.Future[Any]]:
    if not spec.procfs:
        return []
    pids = {m.pid for m in topo.members if m.node_ip in (None, spec.node_ip)}
    return submit_procfs(writer, pids, spec, opts, deadline, pool)


def _submit_log_heads(
    writer: BundleWriter,
    topo: Topology,
    spec: NodeSpec,
    opts: CollectOptions,
    deadline: Deadline,
    pool: cf.ThreadPoolExecutor,
) -> list[cf.Future[Any]]:
    if not spec.log_heads:
        return []
    actors = unserved_engine_actors(topo, spec)
    if not actors:
        return []
    return [pool.submit(_log_heads, writer, actors, spec, opts, deadline)]


# The procfs probes go first: their reads take milliseconds and start before the py-spy dumps
# attach, so a process's state and wchan are rarely read while py-spy holds it (tracing stop).
NODE_PROBES: tuple[NodeProbe, ...] = (
    _submit_procfs,
    _submit_stacks,
    _submit_ras,
    _submit_log_heads,
)


def unserved_engine_actors(topo: Topology, spec: NodeSpec) -> list[tuple[int, str]]:
    """SGLangEngine actors of this node whose URL no listening child gives (a server that is gone,
    or not up yet), and whose log heads this run has not read yet."""
    return [
        (m.pid, m.class_name or "SGLangEngine")
        for m in topo.members
        if m.role is Role.SGLANG_ENGINE
        and m.kind == "actor"
        and m.engine_url is None
        and m.node_ip in (None, spec.node_ip)
        and m.pid not in spec.heads_read
    ]


def submit_stacks(
    writer: BundleWriter,
    topo: Topology,
    spec: NodeSpec,
    opts: CollectOptions,
    deadline: Deadline,
    pool: cf.ThreadPoolExecutor,
) -> list[cf.Future[Any]]:
    """Start a py-spy dump of every slime process of this node."""
    mine = [m for m in topo.members if m.node_ip in (None, spec.node_ip)]
    return [pool.submit(_stack, writer, m.pid, spec, opts, deadline) for m in mine]


def submit_procfs(
    writer: BundleWriter,
    pids: set[int],
    spec: NodeSpec,
    opts: CollectOptions,
    deadline: Deadline,
    pool: cf.ThreadPoolExecutor,
) -> list[cf.Future[Any]]:
    """Start the procfs reads of this node: TCP connections and kernel-side state of `pids`."""
    from slime_hangdoctor.collect.kernel import record_kernel
    from slime_hangdoctor.collect.sockets import record_sockets

    if not pids:
        return []
    timeout = deadline.clamp(opts.probe_timeout_s)
    kw: dict[str, Any] = {"node_ip": spec.node_ip, "sample": spec.sample, "timeout": timeout}
    return [
        pool.submit(record_sockets, writer, sorted(pids), **kw),
        pool.submit(record_kernel, writer, sorted(pids), **kw),
    ]


def sample_gpus_over(
    writer: BundleWriter, node_ip: str | None, opts: CollectOptions, deadline: Deadline
) -> None:
    """NVML (then GPM) of this node, sampled across the window."""
    from slime_hangdoctor.collect.nvml import sample_gpm, sample_gpus

    sample_gpus(
        writer,
        node_ip=node_ip,
        duration_s=max(0.0, min(opts.window_s, deadline.remaining() - 1.0)),
        interval_s=opts.nvml_interval_s,
        deadline=time.monotonic() + deadline.remaining(),
        detail=opts.gpu_detail,
    )
    if opts.gpm and opts.gpu_detail and not deadline.expired:
        sample_gpm(
            writer,
            node_ip=node_ip,
            duration_s=min(1.0, deadline.remaining()),
            deadline=time.monotonic() + deadline.remaining(),
        )


def export_records(writer: BundleWriter) -> list[tuple[dict[str, Any], bytes | None, str]]:
    """Every record of a (temporary) writer with its bytes, to re-add to the main bundle."""
    out: list[tuple[dict[str, Any], bytes | None, str]] = []
    for rec in writer.records:
        data = None
        suffix = ".txt"
        if rec.artifact:
            path = writer.root / rec.artifact
            suffix = Path(rec.artifact).suffix or ".txt"
            try:
                data = path.read_bytes()
            except OSError:
                data = None
        out.append((rec.to_json(), data, suffix))
    return out


def run_detached_sample(
    spec: NodeSpec, opts: CollectOptions, budget_s: float, gpus: bool
) -> list[tuple[dict[str, Any], bytes | None, str]]:
    """A whole node-local sample into a private temp bundle; returns its records (for a Ray task)."""
    deadline = Deadline(budget_s)
    with tempfile.TemporaryDirectory(prefix="hangdoctor-node-") as tmp:
        writer = BundleWriter(Path(tmp) / "b", command="node-sample", known_secrets=opts.secrets())
        if gpus:
            sample_gpus_over(writer, spec.node_ip, opts, deadline)
        else:
            with cf.ThreadPoolExecutor(max_workers=max(2, opts.concurrency)) as pool:
                sample_node(writer, spec, opts, deadline, pool)
        return export_records(writer)


def _stack(
    writer: BundleWriter, pid: int, spec: NodeSpec, opts: CollectOptions, deadline: Deadline
) -> ProbeRecord:
    from slime_hangdoctor.collect.pyspy import dump_stack

    timeout = deadline.clamp(opts.probe_timeout_s + (3.0 if opts.native else 0.0))
    return dump_stack(
        writer,
        pid,
        node_ip=spec.node_ip,
        sample=spec.sample,
        timeout=timeout,
        native=opts.native,
        pyspy=opts.pyspy,
    )


def _log_heads(
    writer: BundleWriter,
    actors: list[tuple[int, str]],
    spec: NodeSpec,
    opts: CollectOptions,
    deadline: Deadline,
) -> list[ProbeRecord]:
    from slime_hangdoctor.collect.log_heads import record_log_heads

    return record_log_heads(
        writer,
        actors,
        node_ip=spec.node_ip,
        sample=spec.sample,
        timeout=deadline.clamp(opts.probe_timeout_s),
    )


def _ras(
    writer: BundleWriter, spec: NodeSpec, opts: CollectOptions, deadline: Deadline
) -> ProbeRecord:
    from slime_hangdoctor.collect.nccl_ras import query_ras

    return query_ras(
        writer,
        node_ip=spec.node_ip,
        sample=spec.sample,
        port=opts.ras_port,
        timeout=deadline.clamp(opts.probe_timeout_s),
    )


def pending_actors(snapshot: Snapshot) -> frozenset[tuple[int, str]]:
    """(pid, class) of the actors Ray lists with a worker pid but no node: an actor whose
    constructor still runs (Ray 2.60 answers PENDING_CREATION, node_id null, with the pid of the
    worker running `__init__`). `pids_by_node` cannot place them; each node's scan looks for them."""
    return frozenset(
        (a.pid, a.class_name)
        for a in snapshot.actors
        if a.pid and not a.node_id and a.state not in ("ALIVE", "DEAD") and a.class_name
    )


def pids_by_node(snapshot: Snapshot) -> dict[str, set[int]]:
    """Ray worker pids of the job's live actors, by node id (JobSupervisor too: the driver is its child)."""
    out: dict[str, set[int]] = {}
    for a in snapshot.actors:
        if a.state == "ALIVE" and a.pid and a.node_id:
            out.setdefault(a.node_id, set()).add(a.pid)
    return out
