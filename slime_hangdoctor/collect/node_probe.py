"""What a node-local probe is given, and what it returns: the contract between `collect/node.py`
and each source's collector module (its `NODE_PROBE`, named by the source's `SourceSpec`)."""

from __future__ import annotations

import concurrent.futures as cf
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from slime_hangdoctor.bundle import BundleWriter
from slime_hangdoctor.collect.cluster_scope import ClusterScope
from slime_hangdoctor.collect.options import CollectOptions, Deadline
from slime_hangdoctor.collect.tcp_tables import TcpTables
from slime_hangdoctor.topology import Member, Topology


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
    off: frozenset[str] = frozenset()  # sources (SourceSpec names) not to probe in this sample
    # (source, pids) whose records of that source this run holds already (a source that reads a
    # process once per run, such as the log heads, skips them)
    read_before: tuple[tuple[str, frozenset[int]], ...] = ()
    # (source, pids) whose probe of that source this sample has started already (the second
    # sample's stacks of the processes the first one found start before its Ray state is read)
    started: tuple[tuple[str, frozenset[int]], ...] = ()
    # the Ray cluster diagnosed: the scan leaves out another cluster's processes
    cluster: ClusterScope | None = None

    def wants(self, source: str) -> bool:
        return source not in self.off

    def done(self, source: str) -> frozenset[int]:
        return next((pids for name, pids in self.read_before if name == source), frozenset())

    def started_for(self, source: str) -> frozenset[int]:
        return next((pids for name, pids in self.started if name == source), frozenset())


@dataclass(frozen=True)
class WindowContext:
    """What a window probe may use: it starts once, while the window between the two samples
    passes (the dashboard and Ray's agents are idle then), and returns the thread it started
    (joined with the run's others before the bundle is finished), or None."""

    writer: BundleWriter
    client: Any  # collect.dashboard.DashboardClient
    opts: CollectOptions
    deadline: Deadline
    say: Callable[[str], None]


WindowProbe = Callable[[WindowContext], "threading.Thread | None"]


@dataclass(frozen=True)
class NodeContext:
    """One node's sample as a probe sees it: the processes the scan found, where to write, how long."""

    writer: BundleWriter
    topo: Topology
    spec: NodeSpec
    opts: CollectOptions
    deadline: Deadline
    pool: cf.ThreadPoolExecutor
    # the sample's TCP tables, read by the process scan already (the sockets probe's)
    tcp_tables: TcpTables | None = None

    def members(self) -> list[Member]:
        """The slime processes of this node."""
        return [m for m in self.topo.members if m.node_ip in (None, self.spec.node_ip)]

    def submit_over_members(self, record: Callable[..., Any]) -> list[cf.Future[Any]]:
        """`record(writer, pids, node_ip=, sample=, timeout=)` over this node's slime processes,
        as one future; none where the node has none (a per-node read of the processes' procfs)."""
        pids = sorted({m.pid for m in self.members()})
        if not pids:
            return []
        spec = self.spec
        return [
            self.pool.submit(
                record,
                self.writer,
                pids,
                node_ip=spec.node_ip,
                sample=spec.sample,
                timeout=self.timeout(),
            )
        ]

    def timeout(self, extra_s: float = 0.0) -> float:
        """One probe's timeout, clamped to what is left of the run."""
        return self.deadline.clamp(self.opts.probe_timeout_s + extra_s)


# A node-local probe: start this source's probes of one node's sample on the pool (each ends as a
# ProbeRecord in the writer; never raises) and return their futures.
NodeProbe = Callable[[NodeContext], list[cf.Future[Any]]]
