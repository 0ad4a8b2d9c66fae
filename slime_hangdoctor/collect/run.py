"""One collection run: discover the job, sample it twice over the window, write the bundle.

Sample 0 and sample 1 are taken `window_s` apart; NVML is sampled continuously between them. Every
probe runs under its own timeout, all of them under the run's deadline; nothing here raises past a
probe (RayUnreachable aside, which the caller turns into exit 3 unless `--local`).
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slime_hangdoctor import bundle as b
from slime_hangdoctor.bundle import Bundle, BundleWriter, Manifest, ProbeRecord
from slime_hangdoctor.collect.options import CollectOptions, Deadline
from slime_hangdoctor.errors import RayUnreachable
from slime_hangdoctor.facts import Outcome
from slime_hangdoctor.load import load_snapshot
from slime_hangdoctor.topology import Member, Topology, build_topology
from slime_hangdoctor.verdict import Role

ProgressFn = Callable[[str], None]


@dataclass(frozen=True)
class CollectResult:
    root: Path
    manifest: Manifest
    elapsed_s: float
    ray_error: str | None = None  # why the Ray cluster could not be read (None when it was)


def collect(
    address: str | None,
    opts: CollectOptions,
    out: Path,
    *,
    command: str = "collect",
    progress: ProgressFn | None = None,
) -> CollectResult:
    """Collect evidence from the job at `address` into a bundle at `out`."""
    say = progress or (lambda _msg: None)
    deadline = Deadline(opts.timeout_s)
    writer = BundleWriter(
        out,
        command=command,
        window_s=opts.window_s,
        target={"address": address, "sglang_urls": list(opts.sglang_urls), "local": opts.local},
        options=_options_record(opts),
        known_secrets=opts.secrets(),
    )
    client: Any = None
    ray_error: str | None = None
    if not opts.local:
        say("finding the Ray cluster")
        try:
            client = _connect(address, opts, deadline, writer)
        except RayUnreachable as exc:
            ray_error = str(exc)
            writer.add(
                ProbeRecord(
                    b.RAY_DASHBOARD,
                    address or "auto",
                    Outcome.UNAVAILABLE,
                    ray_error,
                    started_at=time.time(),
                )
            )
    local_ips = _local_ips()
    with cf.ThreadPoolExecutor(
        max_workers=max(2, opts.concurrency), thread_name_prefix="probe"
    ) as pool:
        t0 = time.monotonic()
        threads: list[threading.Thread] = []

        def on_node(ip: str | None) -> None:
            threads.append(_start_gpu_sampling(writer, ip, opts, deadline))

        topo, node_ip = _sample(0, writer, client, opts, deadline, pool, local_ips, say, on_node)
        _sleep_until(t0 + opts.window_s, deadline, say)
        topo, node_ip = _sample(1, writer, client, opts, deadline, pool, local_ips, say)
        if opts.flight_recorder:
            say("asking the ranks' flight recorders to dump")
            _flight_recorder(writer, topo, node_ip, opts, deadline)
        for thread in threads:
            thread.join(timeout=deadline.clamp(opts.probe_timeout_s + opts.window_s))
    manifest = writer.finish()
    return CollectResult(writer.root, manifest, deadline.elapsed(), ray_error)


def _options_record(opts: CollectOptions) -> dict[str, Any]:
    return {
        "window_s": opts.window_s,
        "timeout_s": opts.timeout_s,
        "probe_timeout_s": opts.probe_timeout_s,
        "native": opts.native,
        "health_generate": opts.health_generate,
        "flight_recorder": opts.flight_recorder,
        "api_key_given": bool(opts.api_key),
        "ray_token_given": bool(opts.ray_token),
        "local": opts.local,
    }


def _connect(
    address: str | None, opts: CollectOptions, deadline: Deadline, writer: BundleWriter
) -> Any:
    from slime_hangdoctor.collect.address import resolve_cluster
    from slime_hangdoctor.collect.dashboard import DashboardClient

    cluster = resolve_cluster(
        address, timeout=deadline.clamp(min(6.0, opts.timeout_s / 2)), token=opts.ray_token
    )
    writer.target["dashboard_url"] = cluster.dashboard_url
    writer.target["gcs_address"] = cluster.gcs_address
    writer.target["address_forms_tried"] = list(cluster.tried)
    return DashboardClient(
        cluster.dashboard_url, token=opts.ray_token, timeout=opts.probe_timeout_s
    )


def _sample(
    index: int,
    writer: BundleWriter,
    client: Any,
    opts: CollectOptions,
    deadline: Deadline,
    pool: cf.ThreadPoolExecutor,
    local_ips: set[str],
    say: ProgressFn,
    on_node: Callable[[str | None], None] | None = None,
) -> tuple[Topology, str | None]:
    """Take one sample: Ray state, processes, then stacks, engines, routers and RAS concurrently."""
    from slime_hangdoctor.collect.processes import record_processes

    writer.note_sample(index, time.time())
    if client is not None and not deadline.expired:
        say(f"sample {index + 1}/2: reading Ray state")
        from slime_hangdoctor.collect.dashboard import capture_state

        capture_state(writer, client, sample=index)
    partial = _partial_snapshot(writer)
    node_ip = _local_node_ip(partial, local_ips)
    if on_node is not None:
        on_node(node_ip)
    extra = {
        j.driver_pid
        for j in partial.jobs
        if j.status == "RUNNING"
        and j.driver_pid
        and (j.driver_node_ip in local_ips | {node_ip, None})
    }
    say(f"sample {index + 1}/2: scanning processes")
    record_processes(writer, node_ip=node_ip, sample=index, extra_pids=extra)
    topo = build_topology(_partial_snapshot(writer))
    jobs: list[cf.Future[Any]] = []
    local = [m for m in topo.members if _is_local(m, node_ip, local_ips)]
    say(f"sample {index + 1}/2: {len(local)} processes, {len(topo.engines)} engines")
    for m in local:
        jobs.append(pool.submit(_stack, writer, m, node_ip, index, opts, deadline))
    for remote in sorted(
        {m.node_ip for m in topo.members if not _is_local(m, node_ip, local_ips)} - {None}
    ):
        if index == 0:
            _remote_blind_spot(writer, str(remote), topo)
    urls = {e.url for e in topo.engines} | set(opts.sglang_urls)
    for url in sorted(urls):
        jobs.append(pool.submit(_engine, writer, url, node_ip, index, opts, deadline))
    for url in sorted(set(topo.routers) | set(opts.router_urls)):
        jobs.append(pool.submit(_router, writer, url, node_ip, index, opts, deadline))
    jobs.append(pool.submit(_ras, writer, node_ip, index, opts, deadline))
    cf.wait(jobs, timeout=deadline.clamp(opts.probe_timeout_s * 2 + 1.0))
    return topo, node_ip


def _partial_snapshot(writer: BundleWriter) -> Any:
    with Bundle(writer.root, writer.manifest()) as view:
        return load_snapshot(view)


def _is_local(m: Member, node_ip: str | None, local_ips: set[str]) -> bool:
    return m.node_ip is None or m.node_ip == node_ip or m.node_ip in local_ips


def _stack(
    writer: BundleWriter,
    m: Member,
    node_ip: str | None,
    sample: int,
    opts: CollectOptions,
    deadline: Deadline,
) -> ProbeRecord:
    from slime_hangdoctor.collect.pyspy import dump_stack

    timeout = deadline.clamp(opts.probe_timeout_s + (3.0 if opts.native else 0.0))
    return dump_stack(
        writer,
        m.pid,
        node_ip=node_ip,
        sample=sample,
        timeout=timeout,
        native=opts.native,
        pyspy=opts.pyspy,
    )


def _engine(
    writer: BundleWriter,
    url: str,
    node_ip: str | None,
    sample: int,
    opts: CollectOptions,
    deadline: Deadline,
) -> list[ProbeRecord]:
    from slime_hangdoctor.collect.sglang import probe_engine

    return probe_engine(
        writer,
        url,
        node_ip=node_ip,
        sample=sample,
        timeout=deadline.clamp(opts.probe_timeout_s),
        api_key=opts.api_key,
        health_generate=opts.health_generate,
    )


def _router(
    writer: BundleWriter,
    url: str,
    node_ip: str | None,
    sample: int,
    opts: CollectOptions,
    deadline: Deadline,
) -> list[ProbeRecord]:
    from slime_hangdoctor.collect.sglang import probe_router

    return probe_router(
        writer,
        url,
        node_ip=node_ip,
        sample=sample,
        timeout=deadline.clamp(opts.probe_timeout_s),
        api_key=opts.api_key,
    )


def _ras(
    writer: BundleWriter, node_ip: str | None, sample: int, opts: CollectOptions, deadline: Deadline
) -> ProbeRecord:
    from slime_hangdoctor.collect.nccl_ras import query_ras

    return query_ras(
        writer,
        node_ip=node_ip,
        sample=sample,
        port=opts.ras_port,
        timeout=deadline.clamp(opts.probe_timeout_s),
    )


def _start_gpu_sampling(
    writer: BundleWriter, node_ip: str | None, opts: CollectOptions, deadline: Deadline
) -> threading.Thread:
    from slime_hangdoctor.collect.nvml import sample_gpm, sample_gpus

    def run() -> None:
        sample_gpus(
            writer,
            node_ip=node_ip,
            duration_s=max(0.0, min(opts.window_s, deadline.remaining() - 1.0)),
            interval_s=opts.nvml_interval_s,
            deadline=time.monotonic() + deadline.remaining(),
        )
        if opts.gpm and not deadline.expired:
            sample_gpm(
                writer,
                node_ip=node_ip,
                duration_s=min(1.0, deadline.remaining()),
                deadline=time.monotonic() + deadline.remaining(),
            )

    thread = threading.Thread(target=run, name="nvml-sampler", daemon=True)
    thread.start()
    return thread


def _flight_recorder(
    writer: BundleWriter,
    topo: Topology,
    node_ip: str | None,
    opts: CollectOptions,
    deadline: Deadline,
) -> None:
    from slime_hangdoctor.collect.flight_recorder import dump_flight_recorder, find_fr_targets

    snap = _partial_snapshot(writer)
    envs = {(p.pid): p.env for p in snap.processes_at(1) or snap.processes_at(0)}
    targets = []
    for m in topo.members:
        if m.role is Role.TRAIN_RANK or m.kind == "scheduler":
            target = find_fr_targets(envs.get(m.pid, {}), m.pid)
            if target is not None:
                targets.append(target)
    if not targets:
        writer.add(
            ProbeRecord(
                b.FLIGHT_RECORDER,
                "all",
                Outcome.UNAVAILABLE,
                "no process has TORCH_NCCL_DEBUG_INFO_PIPE_FILE and TORCH_FR_DUMP_TEMP_FILE set",
                node_ip=node_ip,
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
                node_ip=node_ip,
                timeout=deadline.clamp(max(10.0, opts.probe_timeout_s)),
            )
            for t in targets
        ]
        cf.wait(futures, timeout=deadline.clamp(12.0))


def _remote_blind_spot(writer: BundleWriter, node_ip: str, topo: Topology) -> None:
    n = sum(1 for m in topo.members if m.node_ip == node_ip)
    writer.add(
        ProbeRecord(
            b.PROCESSES,
            f"node {node_ip}",
            Outcome.UNAVAILABLE,
            f"{n} slime processes on node {node_ip} were not inspected (stacks, /proc, GPUs): run the doctor on that node",
            node_ip=node_ip,
            started_at=time.time(),
        )
    )


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


def _local_node_ip(snapshot: Any, local_ips: set[str]) -> str | None:
    for node in snapshot.nodes:
        if node.node_ip in local_ips and node.state == "ALIVE":
            return str(node.node_ip)
    for node in snapshot.nodes:
        if node.node_ip in local_ips:
            return str(node.node_ip)
    return None
