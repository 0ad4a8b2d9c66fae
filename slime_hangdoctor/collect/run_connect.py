"""Finding the Ray cluster a run reads, and where this collector stands in it.

`connect_ray` resolves the address and opens the dashboard's client (or records why it could
not); `locate` places this machine in the cluster from the first sample's Ray state;
`cluster_scope` is the cluster the local process scan keeps (collect/cluster_scope.py)."""

from __future__ import annotations

import time

from slime_hangdoctor.bundle import BundleWriter, ProbeRecord
from slime_hangdoctor.collect.cluster_scope import (
    ClusterScope,
    address_scope,
    ray_temp_dir,
    session_scope,
)
from slime_hangdoctor.collect.options import CollectOptions, Deadline, resolve_token
from slime_hangdoctor.collect.run_context import Here, ProgressFn, RayConnection, RunContext
from slime_hangdoctor.errors import RayUnreachable
from slime_hangdoctor.outcome import Outcome
from slime_hangdoctor.parsers.ray_state import NODE_ALIVE, RAY_DASHBOARD, RAY_STATE
from slime_hangdoctor.redact import redact_text
from slime_hangdoctor.snapshot import Snapshot


def connect_ray(
    writer: BundleWriter,
    opts: CollectOptions,
    address: str | None,
    deadline: Deadline,
    say: ProgressFn,
) -> RayConnection | RayUnreachable:
    """Find and connect to the Ray cluster at `address` (None: where one is found); the error,
    its message redacted and its help kept, where none could be read (also a probe record)."""
    say("finding the Ray cluster")
    try:
        return _connect(address, opts, deadline, writer)
    except RayUnreachable as exc:
        reason = redact_text(str(exc), opts.secrets(address))
        writer.add(
            ProbeRecord(
                RAY_DASHBOARD,
                address or "auto",
                Outcome.UNAVAILABLE,
                reason,
                started_at=time.time(),
            )
        )
        return RayUnreachable(reason, help_text=exc.help_text)


def _connect(
    address: str | None, opts: CollectOptions, deadline: Deadline, writer: BundleWriter
) -> RayConnection:
    """The dashboard's client, the GCS address if known, whether the token may go to them.
    A dashboard found at a guessed address is read without the token (address.py)."""
    from slime_hangdoctor.collect.address import resolve_cluster
    from slime_hangdoctor.collect.dashboard import DashboardClient

    cluster = resolve_cluster(
        address,
        timeout=deadline.clamp(min(6.0, opts.timeout_s / 2)),
        token=opts.ray_token,
        uid=opts.uid,
    )
    writer.target["dashboard_url"] = cluster.dashboard_url
    writer.target["gcs_address"] = cluster.gcs_address
    writer.target["session_name"] = cluster.session_name
    writer.target["address_forms_tried"] = list(cluster.tried)
    if cluster.distrusted:  # a blind spot: the cluster those files name was not looked at
        writer.add(
            ProbeRecord(
                RAY_DASHBOARD,
                "local cluster files",
                Outcome.DENIED,
                "; ".join(cluster.distrusted),
                started_at=time.time(),
            )
        )
    client = DashboardClient(
        cluster.dashboard_url,
        token=opts.ray_token if cluster.token_ok else "",
        timeout=opts.probe_timeout_s,
    )
    return RayConnection(client, cluster.gcs_address, cluster.token_ok)


def locate(ctx: RunContext, state: Snapshot) -> Here:
    """Where we are (this machine's Ray node), and the GCS (for a dashboard-only address)."""
    node_ip, node_id = _local_node(state, ctx.local_ips)
    gcs = ctx.ray.gcs_address if ctx.ray is not None else None
    if gcs is None and (ctx.token_ok or not resolve_token(ctx.opts.ray_token)):
        # (a GCS that a guessed dashboard names is never sent the token: Ray's driver would)
        gcs = _gcs_from_state(ctx.writer)
    return Here(node_ip, node_id, gcs)


def _gcs_from_state(writer: BundleWriter) -> str | None:
    """The GCS address from the node summary the dashboard gave (for a dashboard-only address)."""
    from slime_hangdoctor.parsers.ray_state import gcs_address_from_summary

    for rec in writer.records:
        endpoint = str(rec.meta.get("endpoint", ""))
        if rec.source != RAY_DASHBOARD or not endpoint.startswith("/nodes") or not rec.artifact:
            continue
        try:
            found = gcs_address_from_summary((writer.root / rec.artifact).read_bytes())
        except OSError:
            continue
        if found:
            writer.target["gcs_address"] = found
            return found
    return None


def _local_node(state: Snapshot, local_ips: frozenset[str]) -> tuple[str | None, str | None]:
    """This machine's Ray node: the head if it runs here, else the first alive node with a local IP."""
    here = [
        n for n in state.joined(RAY_STATE).nodes if n.node_ip in local_ips and n.state == NODE_ALIVE
    ]
    here.sort(key=lambda n: (not n.is_head, n.node_ip))
    if here:
        return here[0].node_ip, here[0].node_id
    return None, None


def cluster_scope(ctx: RunContext) -> ClusterScope:
    """The Ray cluster this run diagnoses, as far as it knows it (collect/cluster_scope.py):
    the one it connected to (this node's id in it, its session, its GCS), else the address given,
    else the local session (`session_latest`, a session of root, ours or --uid's; a guess, applied
    only where a raylet here answers for it)."""
    session = ctx.writer.target.get("session_name")
    session = session if isinstance(session, str) and session else None
    here = ctx.here
    if ctx.client is not None and (here.node_id or session or here.gcs_address):
        return ClusterScope(here.node_id, session, here.gcs_address, "the Ray cluster connected to")
    given = address_scope(ctx.address)
    if given.known:
        return given
    from slime_hangdoctor.safe_fs import trusted_owners

    return session_scope(ray_temp_dir(), trusted_owners(ctx.opts.uid))


def local_ips() -> frozenset[str]:
    import psutil

    ips = {"127.0.0.1", "::1"}
    try:
        for addrs in psutil.net_if_addrs().values():
            ips.update(a.address.split("%")[0] for a in addrs if a.address)
    except OSError:
        pass
    return frozenset(ips)
