"""Node-local collection: what can only be read on the node where a process lives.

`sample_node` takes one sample of one node (its slime processes, their py-spy stacks, NCCL RAS) into a
bundle writer. The CLI runs it in-process for its own node and, through `collect.remote`, as a Ray task
pinned to every other node that hosts slime processes.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import functools
import importlib
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from slime_hangdoctor.bundle import Bundle, BundleWriter
from slime_hangdoctor.collect.node_probe import (
    NodeContext,
    NodeProbe,
    NodeSpec,
    WindowProbe,
)
from slime_hangdoctor.collect.options import CollectOptions, Deadline
from slime_hangdoctor.load import ParseCache, load_snapshot
from slime_hangdoctor.parsers.ray_state import ACTOR_ALIVE, ACTOR_DEAD, RAY_STATE, TASK_HISTORY
from slime_hangdoctor.snapshot import Snapshot
from slime_hangdoctor.sources import SPECS
from slime_hangdoctor.topology import Topology, build_topology

# What discovery reads (build_topology, and the run's node, driver and actor look-ups): Ray
# state, the process tables, the routers' engine lists and the engine actors' log heads (the URL
# of a server that is gone). Stacks, engine answers, GPU and RAS records and the task history (up to
# ray_state.TASK_LIMIT rows per job) are parsed once, by the analysis: re-parsing them at every
# discovery step cost more with every sample and every target.
DISCOVERY_SOURCES = frozenset(spec.name for spec in SPECS if spec.discovery)


_CACHES: weakref.WeakKeyDictionary[BundleWriter, ParseCache] = weakref.WeakKeyDictionary()
_CACHES_LOCK = threading.Lock()


def parse_cache(writer: BundleWriter) -> ParseCache:
    """The parse cache of the writer's own bundle: each artefact read and parsed once, by
    discovery's many looks and by the analysis of the same run."""
    with _CACHES_LOCK:
        cache = _CACHES.get(writer)
        if cache is None:
            cache = _CACHES[writer] = ParseCache()
        return cache


def partial_snapshot(writer: BundleWriter) -> Snapshot:
    """Parse what discovery needs of what the writer holds so far (DISCOVERY_SOURCES)."""
    manifest = writer.manifest()
    probes = tuple(
        p
        for p in manifest.probes
        if p.source in DISCOVERY_SOURCES and not p.target.startswith(TASK_HISTORY.target)
    )
    with Bundle(writer.root, dataclasses.replace(manifest, probes=probes)) as view:
        return load_snapshot(view, parse_cache(writer))


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
    from slime_hangdoctor.collect.tcp_tables import TcpTables

    tables = TcpTables()  # read once, by the scan, for the sockets probe too
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
        tables=tables,
        cluster=spec.cluster,
    )
    topo = build_topology(partial_snapshot(writer))
    if on_scan is not None:
        on_scan(topo)
    ctx = NodeContext(writer, topo, spec, opts, deadline, pool, tables)
    jobs: list[cf.Future[Any]] = []
    for source, probe in node_probes():
        if spec.wants(source):
            jobs.extend(probe(ctx))
    cf.wait(jobs, timeout=deadline.clamp(opts.probe_timeout_s * 2 + 1.0))
    return topo


@functools.cache
def node_probes() -> tuple[tuple[str, NodeProbe], ...]:
    """(source, NODE_PROBE) of every source whose spec names a node probe, in the sources' order
    (sources.SPECS), the ones that attach to the processes (py-spy) last: a process's state and
    wchan are read before py-spy stops it. Each is run after the process scan of each sample on
    every slime node (this one in-process, the others in a Ray task pinned to the node)."""
    probing = sorted((s for s in SPECS if s.node_probe is not None), key=lambda s: s.attaches)
    return tuple(
        (spec.name, importlib.import_module(str(spec.node_probe)).NODE_PROBE) for spec in probing
    )


@functools.cache
def window_probes() -> tuple[tuple[str, WindowProbe], ...]:
    """(source, WINDOW_PROBE) of every source whose spec names a window probe, in the sources'
    order: each starts once per run, while the window between the two samples passes."""
    return tuple(
        (spec.name, importlib.import_module(str(spec.window_probe)).WINDOW_PROBE)
        for spec in SPECS
        if spec.window_probe is not None
    )


def submit_stacks(
    writer: BundleWriter,
    topo: Topology,
    spec: NodeSpec,
    opts: CollectOptions,
    deadline: Deadline,
    pool: cf.ThreadPoolExecutor,
) -> list[cf.Future[Any]]:
    """Start a py-spy dump of every slime process of this node (the stacks' node probe alone)."""
    from slime_hangdoctor.collect.pyspy import NODE_PROBE

    return NODE_PROBE(NodeContext(writer, topo, spec, opts, deadline, pool))


def sample_gpus_over(
    writer: BundleWriter,
    node_ip: str | None,
    opts: CollectOptions,
    deadline: Deadline,
    until: float | None = None,
) -> None:
    """NVML of this node, sampled across the window, and GPM over one second of it.

    The series ends at `until` (a `time.monotonic()` value: the second sample's start; default:
    a window from now), and GPM is read in a thread of its own beside it, not after it: on a GPU
    node the run's verdict waited for both (about half a second after the second sample, on an
    H200 node)."""
    from slime_hangdoctor.collect.nvml import sample_gpm, sample_gpus

    now = time.monotonic()
    end = now + opts.window_s if until is None else until
    duration = max(0.0, min(end - now, deadline.remaining() - 1.0))
    gpm: threading.Thread | None = None
    if opts.gpm and opts.gpu_detail and not deadline.expired:
        gpm = threading.Thread(
            target=sample_gpm,
            args=(writer,),
            kwargs={
                "node_ip": node_ip,
                "duration_s": min(1.0, max(duration, 0.1)),
                "deadline": time.monotonic() + deadline.remaining(),
            },
            name="gpm-sampler",
            daemon=True,
        )
        gpm.start()
    sample_gpus(
        writer,
        node_ip=node_ip,
        duration_s=duration,
        interval_s=opts.nvml_interval_s,
        deadline=time.monotonic() + deadline.remaining(),
        detail=opts.gpu_detail,
    )
    if gpm is not None:
        gpm.join(timeout=deadline.clamp(2.0))


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


def pending_actors(snapshot: Snapshot) -> frozenset[tuple[int, str]]:
    """(pid, class) of the actors Ray lists with a worker pid but no node: an actor whose
    constructor still runs (Ray 2.60 answers PENDING_CREATION, node_id null, with the pid of the
    worker running `__init__`). `pids_by_node` cannot place them; each node's scan looks for them."""
    return frozenset(
        (a.pid, a.class_name)
        for a in snapshot.joined(RAY_STATE).actors
        if a.pid and not a.node_id and a.state not in (ACTOR_ALIVE, ACTOR_DEAD) and a.class_name
    )


def pids_by_node(snapshot: Snapshot) -> dict[str, set[int]]:
    """Ray worker pids of the job's live actors, by node id (JobSupervisor too: the driver is its child)."""
    out: dict[str, set[int]] = {}
    for a in snapshot.joined(RAY_STATE).actors:
        if a.state == ACTOR_ALIVE and a.pid and a.node_id:
            out.setdefault(a.node_id, set()).add(a.pid)
    return out
