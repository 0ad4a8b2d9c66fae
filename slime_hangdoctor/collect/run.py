"""One collection run: discover the job, sample it twice over the window, write the bundle.

Sample 0 and sample 1 are taken `window_s` apart; NVML is sampled continuously between them. This node
is sampled in-process; every other node that hosts slime processes is sampled by a Ray task pinned to
it (`collect.remote`). Engines and routers are probed by URL from here. Every probe runs under its own
timeout, all of them under the run's deadline; nothing here raises past a probe (an unreachable Ray is
returned as `ray_error`, which the caller turns into exit 3 unless `--local`).
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from slime_hangdoctor import bundle as bundle_format
from slime_hangdoctor.bundle import Bundle, BundleWriter, Manifest, ProbeRecord
from slime_hangdoctor.collect.cluster_scope import (
    ClusterScope,
    address_scope,
    ray_temp_dir,
    session_scope,
)
from slime_hangdoctor.collect.dashboard import DashboardClient, capture_state, capture_task_history
from slime_hangdoctor.collect.node import (
    parse_cache,
    partial_snapshot,
    pending_actors,
    pids_by_node,
    sample_gpus_over,
    sample_node,
    submit_stacks,
    window_probes,
)
from slime_hangdoctor.collect.node_probe import NodeContext, NodeSpec, WindowContext
from slime_hangdoctor.collect.options import CollectOptions, Deadline, resolve_token
from slime_hangdoctor.collect.remote import (
    RayTasks,
    RemoteNode,
    Started,
    collect_remote,
    gather_remote,
    node_blind_spot,
)
from slime_hangdoctor.errors import RayUnreachable
from slime_hangdoctor.load import ParseCache, load_snapshot
from slime_hangdoctor.outcome import Outcome
from slime_hangdoctor.parsers.processes import SPEC as PROCESSES
from slime_hangdoctor.parsers.pyspy import PYSPY
from slime_hangdoctor.parsers.ray_state import (
    ACTOR_ALIVE,
    JOB_RUNNING,
    NODE_ALIVE,
    RAY_DASHBOARD,
    RAY_STATE,
)
from slime_hangdoctor.redact import redact_text
from slime_hangdoctor.snapshot import Snapshot
from slime_hangdoctor.sources import SPECS
from slime_hangdoctor.topology import (
    CLASS_ROLES,
    MemberKind,
    Topology,
    build_topology,
    listen_urls,
    own_listen,
)
from slime_hangdoctor.verdict import Role

ProgressFn = Callable[[str], None]
# How long the second sample waits for the first sample's other nodes, at most, before its own
FIRST_REST_WAIT_S = 0.5


class DashboardProbe(Protocol):
    """A probe of the whole cluster through the Ray dashboard, run at each sample in order."""

    def __call__(
        self, writer: BundleWriter, client: DashboardClient, *, sample: int | None, timeout: float
    ) -> object: ...


# The registry of cluster-wide dashboard probes: a new dashboard-read source adds one line (a later
# probe may read what an earlier one stored through `partial_snapshot(writer)`). DASHBOARD_PROBES
# run in order before the sample's node probes; BACKGROUND_DASHBOARD_PROBES start after them, in a
# thread of their own beside the node probes (nothing in the sample reads their answers), and are
# joined before the bundle is finished.
DASHBOARD_PROBES: tuple[DashboardProbe, ...] = (capture_state,)
# Each background probe with the CollectOptions flag that turns it off.
BACKGROUND_DASHBOARD_PROBES: tuple[tuple[DashboardProbe, str], ...] = (
    (capture_task_history, "history"),
)


@dataclass(frozen=True)
class CollectResult:
    root: Path
    manifest: Manifest
    elapsed_s: float
    # why the Ray cluster could not be read (None when it was): the error, its message redacted and
    # its help (how to give the address) kept for the user
    ray_error: RayUnreachable | None = None
    # With `stacks_only_if_stalled`: did anything that moves only with work move between the two
    # samples (None: not asked, or no second sample).
    work_moved: bool | None = None
    # the artefacts of this bundle already read and parsed (for the analysis of the same run)
    cache: ParseCache | None = None
    # The Ray node this collector ran on (the node_ip of its own process scan); None where it
    # knows none (--local, or a machine outside the cluster).
    node_ip: str | None = None


@dataclass
class _Run:
    """The mutable state of one collection run (kept in one place, not in globals)."""

    writer: BundleWriter
    opts: CollectOptions
    deadline: Deadline
    pool: cf.ThreadPoolExecutor
    say: ProgressFn
    client: Any = None
    gcs_address: str | None = None
    # May the Ray token go to this dashboard and the GCS it names? (address.Cluster.token_ok)
    token_ok: bool = True
    local_ips: frozenset[str] = frozenset()
    node_ip: str | None = None
    node_id: str | None = None
    tasks: RayTasks | None = None
    threads: list[threading.Thread] | None = None
    remote_gpu: Started | None = None
    remote_seen: list[RemoteNode] | None = None
    topo: Topology | None = None  # the last sample's
    on_window: Callable[[], None] | None = None  # collect()'s, called by _window_begins
    window_begun: bool = False
    window_end: float | None = None  # epoch seconds: when the second sample is due
    # the first sample's other nodes and their engines, gathered in the window (a thread)
    first_rest: threading.Thread | None = None
    first_topo: Topology | None = None  # the first sample's topology, every node's (that thread's)
    work_moved: bool | None = None
    judge_work_moved: Callable[[BundleWriter], bool] | None = None
    address: str | None = None  # as given (the cluster whose processes the local scan keeps)


def collect(
    address: str | None,
    opts: CollectOptions,
    out: Path,
    *,
    command: str = "collect",
    progress: ProgressFn | None = None,
    judge_work_moved: Callable[[BundleWriter], bool] | None = None,
    on_window: Callable[[], None] | None = None,
) -> CollectResult:
    """Collect evidence from the job at `address` into a bundle at `out`.

    `on_window` is called once the first sample is taken, as the window's wait begins (the CLI
    loads what it needs only after the second sample there: the analysis, the renderer).

    With `opts.stacks_only_if_stalled`, `judge_work_moved` (the watchdog's: what counts as work is
    its policy, not the collector's) says, from what the writer holds after the second sample,
    whether work moved between the samples; its answer is CollectResult.work_moved, and the second
    sample's stacks are taken only when it says no (or when no judge was given)."""
    say = progress or (lambda _msg: None)
    deadline = Deadline(opts.timeout_s)
    writer = BundleWriter(
        out,
        command=command,
        window_s=opts.window_s,
        target={
            "address": address,
            "sglang_urls": list(opts.sglang_urls),
            "local": opts.local,
            "doctor_pid": os.getpid(),  # our own Ray driver (multi-node) is not the job's driver
        },
        options=_options_record(opts),
        known_secrets=opts.secrets(address),
    )
    ray_error: RayUnreachable | None = None
    with cf.ThreadPoolExecutor(
        max_workers=max(2, opts.concurrency), thread_name_prefix="probe"
    ) as pool:
        run = _Run(
            writer,
            opts,
            deadline,
            pool,
            say,
            local_ips=frozenset(_local_ips()),
            threads=[],
            judge_work_moved=judge_work_moved,
            address=address,
        )
        if not opts.local:
            ray_error = _connect_ray(run, address)
        run.on_window = on_window
        try:
            _two_samples(run)
        finally:
            if run.tasks is not None:  # nothing more is asked of the other nodes
                run.tasks.close_soon()
    manifest = writer.finish()
    return CollectResult(
        writer.root,
        manifest,
        deadline.elapsed(),
        ray_error,
        run.work_moved,
        parse_cache(writer),
        run.node_ip,
    )


def _connect_ray(run: _Run, address: str | None) -> RayUnreachable | None:
    """Find and connect to the Ray cluster at `address` (None: where one is found); the error,
    its message redacted and its help kept, where none could be read (also a probe record)."""
    opts, writer = run.opts, run.writer
    run.say("finding the Ray cluster")
    try:
        run.client, run.gcs_address, run.token_ok = _connect(address, opts, run.deadline, writer)
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
    return None


def _two_samples(run: _Run) -> None:
    """The first sample, the window, the second sample, and what ends with it (the flight
    recorders' dumps when asked, the other nodes' GPU readings)."""
    opts, deadline = run.opts, run.deadline
    t0 = time.monotonic()
    run.window_end = time.time() + opts.window_s
    _sample(run, 0)
    _window_begins(run)  # (once: where this node's first sample ended, if not yet)
    _sleep_until(t0 + opts.window_s, deadline, run.say)
    topo = _sample(run, 1)
    if opts.flight_recorder:
        run.say("asking the ranks' flight recorders to dump")
        _flight_recorder(run, topo)
    for thread in run.threads or []:
        thread.join(timeout=deadline.clamp(opts.probe_timeout_s + opts.window_s))
    if run.tasks is not None and run.remote_gpu:
        gather_remote(
            run.tasks, run.writer, run.remote_gpu, None, deadline, opts.probe_timeout_s + 2.0
        )


def _window_begins(run: _Run) -> None:
    """What needs nothing of the second sample starts as soon as this node's first sample is
    taken (other nodes' answers may still be on their way): the logs' tails (the dashboard and
    Ray's agents are idle in the window, so they do not slow the second sample's dumps), the
    parse of the first sample's artefacts, and the caller's `on_window` (the analysis's and the
    renderer's imports). Once per run."""
    if run.window_begun:
        return
    run.window_begun = True
    _start_window_probes(run)
    _start_preparse(run)
    if run.on_window is not None:
        run.on_window()


def _start_preparse(run: _Run) -> None:
    """Parse what the writer holds (the first sample) in a thread, into the writer's parse cache:
    the analysis then parses the second sample's artefacts only."""

    def preparse() -> None:
        try:
            with Bundle(run.writer.root, run.writer.manifest()) as view:
                load_snapshot(view, parse_cache(run.writer))
        except Exception:  # noqa: BLE001 - a head start only: the analysis parses what is missing
            return

    thread = threading.Thread(target=preparse, name="preparse", daemon=True)
    thread.start()
    if run.threads is None:
        run.threads = []
    run.threads.append(thread)


# What the manifest records of the options: every option, but a secret only as given or not, and
# not the URLs (they may carry credentials), the py-spy path or the free-form extras.
_SECRET_OPTIONS = ("api_key", "ray_token")
_UNRECORDED_OPTIONS = ("sglang_urls", "router_urls", "pyspy", "extra")


def _options_record(opts: CollectOptions) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(opts):
        if f.name in _UNRECORDED_OPTIONS:
            continue
        value = getattr(opts, f.name)
        if f.name in _SECRET_OPTIONS:
            out[f"{f.name}_given"] = bool(value)
        else:
            out[f.name] = value
    return out


def _connect(
    address: str | None, opts: CollectOptions, deadline: Deadline, writer: BundleWriter
) -> tuple[Any, str | None, bool]:
    """(the dashboard's client, the GCS address if known, whether the token may go to them).
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
    return client, cluster.gcs_address, cluster.token_ok


def _sample(run: _Run, index: int) -> Topology:
    """One sample: Ray state; this node and every other slime node; then engines and routers.

    At the second sample, the stacks of this node's processes that the first sample found are
    dumped from its start, while Ray's state is read and the processes scanned again (the scan
    then dumps only the processes new since)."""
    run.writer.note_sample(index, time.time())
    endpoints, probed = _early_endpoints(run, index)  # first: the longest probes of a sample
    early = _early_stacks(run, index)
    _read_cluster(run, index)
    state = partial_snapshot(run.writer)
    if index == 0:
        _first_sample_setup(run, state)
    if index == 1 and run.first_rest is not None:
        # the first sample's other nodes, if they are still on their way (briefly: a node that
        # outlasts the window is gathered beside this sample, not before it)
        run.first_rest.join(timeout=run.deadline.clamp(FIRST_REST_WAIT_S))
    remote = _remote_nodes(state, run)
    _note_lost_nodes(run, remote, index)
    started = _start_remote_samples(run, remote, index)
    local_spec = dataclasses.replace(
        _local_spec(run, state, index),
        started=((PYSPY, frozenset(early)),) if early else (),
    )
    topo = _sample_here_and_probe_endpoints(run, local_spec, started, index, endpoints, probed)
    cf.wait(list(early.values()), timeout=run.deadline.clamp(run.opts.probe_timeout_s * 2 + 1.0))
    run.topo = topo
    if index == 1 and run.opts.stacks_only_if_stalled:
        _stacks_if_stalled(run, topo, local_spec)
    return topo


def _early_stacks(run: _Run, index: int) -> dict[int, cf.Future[Any]]:
    """pid -> its dump, for this node's processes of the last sample's topology, started now
    (the second sample of a run that takes stacks at both)."""
    opts = run.opts
    if index == 0 or run.topo is None or PYSPY in _local_spec_off(opts, index):
        return {}
    from slime_hangdoctor.collect.pyspy import NODE_PROBE

    spec = NodeSpec(run.node_ip, index)
    here = NodeContext(run.writer, run.topo, spec, opts, run.deadline, run.pool).members()
    # still there (a process gone since is the scan's to find, not a failed dump)
    alive = tuple(m for m in here if os.path.exists(f"/proc/{m.pid}"))
    topo = dataclasses.replace(run.topo, members=alive)
    ctx = NodeContext(run.writer, topo, spec, opts, run.deadline, run.pool)
    return dict(zip([m.pid for m in alive], NODE_PROBE(ctx), strict=True))


def _early_endpoints(run: _Run, index: int) -> tuple[list[cf.Future[Any]], set[tuple[str, str]]]:
    """(the probes started, what they probe) of the engines that the first sample found listening
    (a server process of the job, on any node: on this one, only if it is still there), started
    with the second sample (a busy engine holds /server_info for seconds: the longest probe of a
    sample, it starts first). The other engines and the routers are probed once the scan has
    found them, as at the first sample."""
    probed: set[tuple[str, str]] = set()
    last = run.first_topo or run.topo
    if index == 0 or last is None:
        return [], probed
    alive = tuple(
        e
        for e in last.engines
        if e.source == "proc-listen"
        and e.server_pid is not None
        and (
            e.node_ip not in (None, run.node_ip)  # another node's: its probe reads /proc there
            or os.path.exists(f"/proc/{e.server_pid}")
        )
    )
    if not alive:
        return [], probed
    known = Topology(engines=alive)
    return _start_endpoints(run, known, index, probed, user_urls=False), probed


def _read_cluster(run: _Run, index: int) -> None:
    """The dashboard probes (DASHBOARD_PROBES), in order, under one probe timeout each."""
    if run.client is None or run.deadline.expired:
        return
    run.say(f"sample {index + 1}/2: reading Ray state")
    client, timeout = run.client, run.deadline.clamp(run.opts.probe_timeout_s)
    for probe in DASHBOARD_PROBES:
        probe(run.writer, client, sample=index, timeout=timeout)

    wanted = [probe for probe, switch in BACKGROUND_DASHBOARD_PROBES if getattr(run.opts, switch)]
    if not wanted:
        return

    def background() -> None:
        for probe in wanted:
            probe(run.writer, client, sample=index, timeout=timeout)

    thread = threading.Thread(target=background, name=f"ray-state-bg{index}", daemon=True)
    thread.start()
    if run.threads is None:
        run.threads = []
    run.threads.append(thread)


def _first_sample_setup(run: _Run, state: Snapshot) -> None:
    """Where we are, the GCS (for a dashboard-only address), and the GPU sampling over the window."""
    run.node_ip, run.node_id = _local_node(state, run.local_ips)
    if run.gcs_address is None and (run.token_ok or not resolve_token(run.opts.ray_token)):
        # (a GCS that a guessed dashboard names is never sent the token: Ray's driver would)
        run.gcs_address = _gcs_from_state(run.writer)
    run.threads = [*(run.threads or []), _start_gpu_sampling(run)]


def _note_lost_nodes(run: _Run, remote: list[tuple[RemoteNode, set[int]]], index: int) -> None:
    """A node that hosted slime actors at the first sample and is gone at the second: a blind spot."""
    if index == 0:
        run.remote_seen = [node for node, _ in remote]
        return
    alive = {node.node_id for node, _ in remote}
    for node in run.remote_seen or []:
        if node.node_id not in alive:
            node_blind_spot(
                run.writer,
                node,
                index,
                "the node hosted slime actors at the first sample and is no longer alive",
            )


def _start_remote_samples(
    run: _Run, remote: list[tuple[RemoteNode, set[int]]], index: int
) -> Started:
    """Ask every other slime node's probe for its sample (and, at sample 0, its GPU readings
    until the window's end), without waiting: the calls go out as soon as the Ray driver is
    connected (its connection starts here, at the first sample), while this node is sampled."""
    if not remote:
        return []
    opts, deadline = run.opts, run.deadline
    if run.tasks is None:
        run.say(f"connecting to Ray to reach {len(remote)} other node(s)")
        # (the token only where it may go to this GCS: address.Cluster.token_ok)
        token = resolve_token(opts.ray_token) if run.token_ok else None
        run.tasks = RayTasks(run.gcs_address, timeout_s=deadline.remaining(), token=token)
    specs = [
        (
            node,
            NodeSpec(
                node.node_ip,
                index,
                frozenset(pids),
                off=sources_off(opts),
                read_before=read_before(run.writer, node.node_ip),
            ),
        )
        for node, pids in remote
    ]
    started = collect_remote(run.tasks, specs, opts, deadline)
    if index == 0:
        gpu_specs = [(node, NodeSpec(node.node_ip, 0)) for node, _ in remote]
        run.remote_gpu = collect_remote(
            run.tasks,
            gpu_specs,
            opts,
            deadline,
            gpus=True,
            budget_s=deadline.clamp(opts.window_s + 3.0),
            until=run.window_end,
        )
    return started


def _local_spec(run: _Run, state: Snapshot, index: int) -> NodeSpec:
    opts = run.opts
    return NodeSpec(
        run.node_ip,
        index,
        roots=_local_roots(state, run),
        extra_pids=frozenset(_local_drivers(state, run)),
        pending=pending_actors(state),
        off=_local_spec_off(opts, index),
        read_before=read_before(run.writer, run.node_ip),
        cluster=_cluster_scope(run),
    )


def _cluster_scope(run: _Run) -> ClusterScope:
    """The Ray cluster this run diagnoses, as far as it knows it (collect/cluster_scope.py):
    the one it connected to (this node's id in it, its session, its GCS), else the address given,
    else the local session (`session_latest`, a session of root, ours or --uid's; a guess, applied
    only where a raylet here answers for it)."""
    session = run.writer.target.get("session_name")
    session = session if isinstance(session, str) and session else None
    if run.client is not None and (run.node_id or session or run.gcs_address):
        return ClusterScope(run.node_id, session, run.gcs_address, "the Ray cluster connected to")
    given = address_scope(run.address)
    if given.known:
        return given
    from slime_hangdoctor.safe_fs import trusted_owners

    return session_scope(ray_temp_dir(), trusted_owners(run.opts.uid))


def _local_spec_off(opts: CollectOptions, index: int) -> frozenset[str]:
    return sources_off(opts, second_stacks=not (opts.stacks_only_if_stalled and index == 1))


def sources_off(opts: CollectOptions, *, second_stacks: bool = True) -> frozenset[str]:
    """The sources this run turned off (a spec's `switch`: a CollectOptions flag that is False);
    py-spy's also at the second sample of the watchdog's look (`second_stacks` False)."""
    off = {s.name for s in SPECS if s.switch is not None and not getattr(opts, s.switch)}
    if not second_stacks:
        off.add(PYSPY)
    return frozenset(off)


def read_before(
    writer: BundleWriter, node_ip: str | None
) -> tuple[tuple[str, frozenset[int]], ...]:
    """(source, pids) of the records this run holds of `node_ip`'s processes, by source: a source
    that reads each process once a run (the log heads) skips those."""
    out: dict[str, set[int]] = {}
    for rec in writer.records:
        pid = rec.meta.get("pid")
        if rec.node_ip == node_ip and isinstance(pid, int):
            out.setdefault(rec.source, set()).add(pid)
    return tuple((source, frozenset(pids)) for source, pids in sorted(out.items()))


def _sample_here_and_probe_endpoints(
    run: _Run,
    local_spec: NodeSpec,
    started: Started,
    index: int,
    endpoints: list[cf.Future[Any]],
    probed: set[tuple[str, str]],
) -> Topology:
    """This node's sample, the other nodes' results, and the engines and routers of all of them.

    Engines and routers are probed as soon as the process scan has found them, while the stacks
    are dumped (a stuck scheduler holds /server_info for 2 s: that wait overlaps the dumps); those
    only known once the other nodes have answered are probed after that. `endpoints` and
    `probed`: the probes started already (`_early_endpoints`), which it adds to."""
    opts, deadline, writer = run.opts, run.deadline, run.writer
    run.say(f"sample {index + 1}/2: processes and stacks")

    def probe_found(found: Topology) -> None:
        endpoints.extend(_start_endpoints(run, found, index, probed))

    sample_node(writer, local_spec, opts, deadline, run.pool, on_scan=probe_found)
    if index == 0:
        _window_begins(run)  # the other nodes' first samples may still take a while

    def rest() -> Topology:
        if started and run.tasks is not None:
            # (the first sample's: in the window's wait, where a node's probe may take the time
            # its worker needs to start, over a loaded raylet)
            wait = opts.probe_timeout_s * 2 + 3.0 + (opts.window_s if index == 0 else 0.0)
            failed = gather_remote(run.tasks, writer, started, index, deadline, wait)
            _traceback_fallback(run, failed, index)
        topo = build_topology(partial_snapshot(writer))
        probe_found(topo)
        if endpoints:
            run.say(f"sample {index + 1}/2: {len(endpoints)} engines and routers")
            cf.wait(endpoints, timeout=deadline.clamp(opts.probe_timeout_s * 2 + 1.0))
            # engines only the router's worker list names (a server that is gone listens nowhere)
            first = len(endpoints)
            topo = build_topology(partial_snapshot(writer))
            probe_found(topo)
            if len(endpoints) > first:
                run.say(f"sample {index + 1}/2: {len(endpoints) - first} engines the router lists")
                cf.wait(endpoints[first:], timeout=deadline.clamp(opts.probe_timeout_s * 2 + 1.0))
        return topo

    if index == 0 and started:
        # The other nodes' first samples (their probes start a worker: a second or two), and the
        # engines only they know of, are gathered while the window passes: they end the first
        # sample only where they outlast the window (the second sample waits for them briefly).
        def rest_of_first() -> None:
            run.first_topo = rest()

        run.first_rest = threading.Thread(
            target=rest_of_first, name="first-sample-rest", daemon=True
        )
        run.first_rest.start()
        run.threads = [*(run.threads or []), run.first_rest]
        return build_topology(partial_snapshot(writer))
    return rest()


def _stacks_if_stalled(run: _Run, topo: Topology, local_spec: NodeSpec) -> None:
    """The watchdog's mode: the second set of stacks only when its judge says no work moved."""
    opts, deadline = run.opts, run.deadline
    if run.judge_work_moved is not None:
        run.work_moved = run.judge_work_moved(run.writer)
    if opts.stacks and not run.work_moved:
        run.say(f"{'nothing moved: ' if run.work_moved is False else ''}taking the stacks again")
        dumps = submit_stacks(run.writer, topo, local_spec, opts, deadline, run.pool)
        cf.wait(dumps, timeout=deadline.clamp(opts.probe_timeout_s * 2 + 1.0))


def _start_endpoints(
    run: _Run,
    topo: Topology,
    index: int,
    probed: set[tuple[str, str]],
    *,
    user_urls: bool = True,
) -> list[cf.Future[Any]]:
    """Submit the probes of the engines and routers of `topo` not in `probed` (which it updates),
    and of each router's Prometheus page (`router_metrics_urls`); with `user_urls`, also the
    engines and routers the user named (--sglang-url, --router-url)."""
    from slime_hangdoctor.collect.sglang import (
        probe_engine,
        probe_router,
        probe_router_metrics,
        server_info_held,
    )

    opts, deadline = run.opts, run.deadline
    jobs: list[cf.Future[Any]] = []

    def once(kind: str, url: str, probe: Callable[..., Any], **kw: Any) -> None:
        if (kind, url) in probed:
            return
        probed.add((kind, url))
        timeout = deadline.clamp(opts.probe_timeout_s)
        jobs.append(
            run.pool.submit(
                probe, run.writer, url, node_ip=run.node_ip, sample=index, timeout=timeout, **kw
            )
        )

    given_routers = set(opts.router_urls) if user_urls else set()
    given_engines = set(opts.sglang_urls) if user_urls else set()
    routers = sorted(set(topo.routers) | given_routers)
    engines = {e.url for e in topo.engines} | given_engines
    for url in sorted(engines):
        once(
            "engine",
            url,
            probe_engine,
            api_key=opts.api_key,
            health_generate=opts.health_generate,
            health=opts.health,
            held=server_info_held(run.writer.records, url, index),
        )
    # what only a router lists is not the job's (topology.Engine.listed_only): read as any
    # stranger's server is, never sent the API key nor the opt-in calls that touch an engine
    # (a URL the user named is theirs even in the early probes that leave it for later)
    for url in sorted({e.url for e in topo.listed} - engines - set(opts.sglang_urls)):
        held = server_info_held(run.writer.records, url, index)
        once("engine", url, probe_engine, api_key=None, listed_by_router=True, held=held)
    for url in routers:
        once("router", url, probe_router, api_key=opts.api_key)
    if any(m.role is Role.ROUTER for m in topo.members):  # the state is read only where one is
        for url in router_metrics_urls(partial_snapshot(run.writer), topo, routers):
            once("router-metrics", url, probe_router_metrics)
    return jobs


def _port_of(url: str) -> int | None:
    try:
        return urlsplit(url if "//" in url else f"//{url}").port
    except ValueError:  # a --router-url with a bad port: probed (and failing) as given
        return None


def router_metrics_urls(state: Snapshot, topo: Topology, routers: list[str]) -> list[str]:
    """The other listening ports of each router process (its role; `sglang::router` titled ones
    have it): where its Prometheus page may be. Its HTTP port (a known router URL) is left out: it
    answers 404 for /metrics; so are the ports it inherited from its parent across the fork
    (slime's router keeps the RolloutManager's Ray gRPC port: `topology.own_listen`)."""
    pids = {(m.node_ip, m.pid) for m in topo.members if m.role is Role.ROUTER}
    served = {_port_of(u) for u in routers}
    out: set[str] = set()
    for obs in state.facts(PROCESSES):
        by_pid = {p.pid: p for p in obs.fact}
        for p in obs.fact:
            if (obs.node_ip, p.pid) not in pids:
                continue
            own = own_listen(p, by_pid.get(p.ppid) if p.ppid is not None else None)
            out.update(u for u in listen_urls(own, obs.node_ip) if _port_of(u) not in served)
    return sorted(out)


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


def _slime_nodes(state: Snapshot) -> dict[str, set[int]]:
    """node id -> pids of its workers, for nodes that host a slime actor."""
    by_node = pids_by_node(state)
    slime = {
        a.node_id
        for a in state.joined(RAY_STATE).actors
        if a.class_name in CLASS_ROLES and a.state == ACTOR_ALIVE and a.node_id
    }
    return {n: pids for n, pids in by_node.items() if n in slime}


def _remote_nodes(state: Snapshot, run: _Run) -> list[tuple[RemoteNode, set[int]]]:
    if run.client is None:
        return []
    ips = {n.node_id: n.node_ip for n in state.joined(RAY_STATE).nodes if n.state == NODE_ALIVE}
    return [
        (RemoteNode(node_id, ips[node_id]), pids)
        for node_id, pids in sorted(_slime_nodes(state).items())
        if node_id != run.node_id and node_id in ips
    ]


def _local_roots(state: Snapshot, run: _Run) -> frozenset[int] | None:
    """With Ray state: the worker pids Ray places on this node; without it: None (find by titles)."""
    if run.client is None or not state.joined(RAY_STATE).seen or run.node_id is None:
        return None
    return frozenset(pids_by_node(state).get(run.node_id, set()))


def _local_drivers(state: Snapshot, run: _Run) -> set[int]:
    return {
        j.driver_pid
        for j in state.joined(RAY_STATE).jobs
        if j.status == JOB_RUNNING
        and j.driver_pid
        and (j.driver_node_ip in (None, run.node_ip) or j.driver_node_ip in run.local_ips)
    }


def _traceback_fallback(run: _Run, failed: list[RemoteNode], index: int) -> None:
    """Stacks of a node whose Ray task failed, through the dashboard's /worker/traceback (if allowed)."""
    if not failed or run.client is None:
        return
    from slime_hangdoctor.collect.dashboard import worker_traceback

    state = partial_snapshot(run.writer)
    for node in failed:
        for a in state.joined(RAY_STATE).actors:
            if (
                a.node_id == node.node_id
                and a.class_name in CLASS_ROLES
                and a.pid
                and a.state == ACTOR_ALIVE
            ):
                worker_traceback(
                    run.writer,
                    run.client,
                    pid=a.pid,
                    node_ip=node.node_ip,
                    sample=index,
                    timeout=run.deadline.clamp(run.opts.probe_timeout_s),
                )


def _start_window_probes(run: _Run) -> None:
    """Start every source's window probe (collect.node.window_probes: the job's logs), from the
    end of the first sample, while the window passes; their threads are joined with the others
    before the bundle is finished."""
    if run.client is None or run.deadline.expired:
        return
    ctx = WindowContext(run.writer, run.client, run.opts, run.deadline, run.say)
    for _, probe in window_probes():
        thread = probe(ctx)
        if thread is not None:
            run.threads = [*(run.threads or []), thread]


def _start_gpu_sampling(run: _Run) -> threading.Thread:
    """This node's GPUs, read until the second sample is due (not a window after this start)."""
    left = (run.window_end - time.time()) if run.window_end is not None else run.opts.window_s
    thread = threading.Thread(
        target=sample_gpus_over,
        args=(run.writer, run.node_ip, run.opts, run.deadline, time.monotonic() + left),
        name="nvml-sampler",
        daemon=True,
    )
    thread.start()
    return thread


def _flight_recorder(run: _Run, topo: Topology) -> None:
    from slime_hangdoctor.collect.flight_recorder import dump_flight_recorder, find_fr_targets

    writer, opts, deadline = run.writer, run.opts, run.deadline
    snap = partial_snapshot(writer)
    envs = {p.pid: p.env for p in (snap.processes_at(1) or snap.processes_at(0))}
    targets = []
    for m in topo.members:
        if m.node_ip not in (None, run.node_ip):
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
                node_ip=run.node_ip,
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
                node_ip=run.node_ip,
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


def _local_ips() -> set[str]:
    import psutil

    ips = {"127.0.0.1", "::1"}
    try:
        for addrs in psutil.net_if_addrs().values():
            ips.update(a.address.split("%")[0] for a in addrs if a.address)
    except OSError:
        pass
    return ips
