"""Bundle -> Snapshot: run each record's parser; a record that fails to parse becomes a blind spot."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from slime_hangdoctor import bundle as b
from slime_hangdoctor.bundle import Bundle, ProbeRecord
from slime_hangdoctor.errors import ParseError
from slime_hangdoctor.facts import (
    ClusterResources,
    HttpAnswer,
    Outcome,
    RayActor,
    RayJob,
    RayNode,
    RayPlacementGroup,
    RayTask,
)
from slime_hangdoctor.parsers import (
    flight_recorder,
    kernel,
    nccl_ras,
    nvml,
    processes,
    pyspy,
    ray_state,
    sglang,
    sockets,
)
from slime_hangdoctor.parsers.log_heads import parse_log_head
from slime_hangdoctor.parsers.logs import parse_log_tail
from slime_hangdoctor.snapshot import (
    FrObs,
    GpmObs,
    GpuObs,
    HttpObs,
    KernelObs,
    LogHeadObs,
    LogObs,
    Parsed,
    ProcessesObs,
    RasObs,
    Snapshot,
    SocketsObs,
    StackObs,
    TaskPageObs,
)

# Sources whose ok record may still carry a reason for what part of it failed (one GPU of eight).
_PARTIAL_SOURCES = frozenset({b.NVML, b.GPM, b.NCCL_RAS, b.PROCESSES, b.SOCKETS, b.KERNEL})


class _Acc:
    """Mutable accumulator used only while loading."""

    def __init__(self) -> None:
        self.actors: dict[str, RayActor] = {}
        self.tasks: dict[str, RayTask] = {}
        # task ids of each running-tasks answer, by (sample, time): the newest one says what still runs
        self.running: dict[tuple[int, float], set[str]] = {}
        self.nodes: dict[str, RayNode] = {}
        self.jobs: list[RayJob] = []
        self.processes: list[ProcessesObs] = []
        self.stacks: list[StackObs] = []
        self.http: list[HttpObs] = []
        self.gpus: list[GpuObs] = []
        self.gpm: list[GpmObs] = []
        self.ras: list[RasObs] = []
        self.flight: list[FrObs] = []
        self.logs: list[LogObs] = []
        self.sockets: list[SocketsObs] = []
        self.kernel: list[KernelObs] = []
        self.log_heads: list[LogHeadObs] = []
        self.summary_gpus: list[GpuObs] = []
        self.task_pages: list[TaskPageObs] = []
        self.pgs: dict[str, RayPlacementGroup] = {}
        self.cluster: dict[tuple[int, float], ClusterResources] = {}
        self.blind: list[str] = []
        self.ray_seen = False


def load_snapshot(bundle: Bundle) -> Snapshot:
    """Parse every artefact of `bundle`; never raises for a bad artefact (it becomes a blind spot)."""
    acc = _Acc()
    for rec in bundle.manifest.probes:
        data = bundle.read(rec)
        if rec.source in HTTP_SOURCES:
            _load_http(acc, rec, data)
            continue
        if rec.outcome is not Outcome.OK:
            acc.blind.append(describe_failure(rec))
            continue
        if rec.reason and rec.source in _PARTIAL_SOURCES:
            acc.blind.append(f"{rec.source} {rec.target}: partly seen: {rec.reason}")
        if data is None:
            acc.blind.append(f"{rec.source} {rec.target}: artefact missing from the bundle")
            continue
        try:
            loader = SOURCE_LOADERS.get(rec.source)
            if loader is not None:
                loader(acc, rec, data)
        except ParseError as exc:
            acc.blind.append(f"{rec.source} {rec.target}: could not parse: {exc}")
        except Exception as exc:  # noqa: BLE001 - a bundle is untrusted input: never crash on it
            acc.blind.append(
                f"{rec.source} {rec.target}: could not parse: {type(exc).__name__}: {exc}"[:400]
            )
    nvml_nodes = {g.node_ip for g in acc.gpus}
    acc.gpus.extend(g for g in acc.summary_gpus if g.node_ip not in nvml_nodes)
    latest_tasks = acc.running[max(acc.running)] if acc.running else None
    tasks = tuple(
        t for t in acc.tasks.values() if latest_tasks is None or t.task_id in latest_tasks
    )
    return Snapshot(
        manifest=bundle.manifest,
        actors=tuple(acc.actors.values()),
        tasks=tasks,
        nodes=tuple(acc.nodes.values()),
        jobs=tuple(acc.jobs),
        processes=tuple(acc.processes),
        stacks=tuple(acc.stacks),
        http=tuple(acc.http),
        gpus=tuple(acc.gpus),
        gpm=tuple(acc.gpm),
        ras=tuple(acc.ras),
        flight=tuple(acc.flight),
        logs=tuple(acc.logs),
        log_heads=tuple(acc.log_heads),
        task_pages=tuple(sorted(acc.task_pages, key=lambda p: (p.sample, p.time))),
        placement_groups=tuple(acc.pgs.values()),
        cluster=acc.cluster[max(acc.cluster)] if acc.cluster else None,
        sockets=tuple(acc.sockets),
        kernel=tuple(acc.kernel),
        blind_spots=tuple(dict.fromkeys(acc.blind)),
        ray_seen=acc.ray_seen,
    )


def describe_failure(rec: ProbeRecord) -> str:
    """One line for a probe that did not end ok."""
    reason = f": {rec.reason}" if rec.reason else ""
    return f"{rec.source} {rec.target}: {rec.outcome.value}{reason}"


def _load_processes(acc: _Acc, rec: ProbeRecord, data: bytes) -> None:
    procs = processes.parse_processes(_text(data))
    acc.processes.append(ProcessesObs(rec.node_ip, rec.sample or 0, procs, rec.started_at or None))


def _load_nvml(acc: _Acc, rec: ProbeRecord, data: bytes) -> None:
    acc.gpus.append(GpuObs(rec.node_ip, nvml.parse_nvml_series(_text(data))))


def _load_gpm(acc: _Acc, rec: ProbeRecord, data: bytes) -> None:
    acc.gpm.append(GpmObs(rec.node_ip, nvml.parse_gpm(_text(data))))


def _load_ras(acc: _Acc, rec: ProbeRecord, data: bytes) -> None:
    acc.ras.append(RasObs(rec.node_ip, rec.sample or 0, nccl_ras.parse_ras(_text(data))))


def _load_sockets(acc: _Acc, rec: ProbeRecord, data: bytes) -> None:
    conns = sockets.parse_sockets(data)
    acc.sockets.append(SocketsObs(rec.node_ip, rec.sample or 0, conns))


def _load_kernel(acc: _Acc, rec: ProbeRecord, data: bytes) -> None:
    node = kernel.parse_kernel(data)
    acc.kernel.append(KernelObs(rec.node_ip, rec.sample or 0, node))
    where = rec.node_ip or "this node"
    if node.log is not None and not node.log.readable:
        acc.blind.append(
            f"kernel log of {where} not readable ({node.log.why_not}): OOM-killer kills there "
            "would not be seen"
        )
    if node.shm_error:
        acc.blind.append(f"/dev/shm of {where}: {node.shm_error}")


def _load_flight_recorder(acc: _Acc, rec: ProbeRecord, data: bytes) -> None:
    rank = _int(rec.meta.get("rank"))
    if rank is None:
        rank = flight_recorder.rank_from_dump_name(
            str(rec.meta.get("dump") or rec.artifact or rec.target)
        )
    dump = flight_recorder.parse_flight_recorder(data, rank, pid=_int(rec.meta.get("pid")))
    acc.flight.append(FrObs(rec.node_ip, dump))


def _load_log(acc: _Acc, rec: ProbeRecord, data: bytes) -> None:
    meta = rec.meta
    tail = parse_log_tail(_text(data), _int(meta.get("utc_offset_s")) or 0)
    acc.logs.append(
        LogObs(
            kind=str(meta.get("kind") or "actor"),
            tail=tail,
            node_ip=rec.node_ip,
            actor_id=_str(meta.get("actor_id")),
            class_name=_str(meta.get("class_name")),
            pid=_int(meta.get("pid")),
            submission_id=_str(meta.get("submission_id")),
            suffix=_str(meta.get("suffix")),
            fetched_at=rec.started_at,
            truncated=bool(meta.get("truncated")),
        )
    )


def _load_log_head(acc: _Acc, rec: ProbeRecord, data: bytes) -> None:
    meta = rec.meta
    pid = _int(meta.get("pid"))
    if pid is None:
        raise ParseError("log head record without a pid")
    acc.log_heads.append(
        LogHeadObs(
            node_ip=rec.node_ip,
            pid=pid,
            class_name=str(meta.get("class_name") or ""),
            stream=str(meta.get("stream") or ""),
            head=parse_log_head(data),
            file=_str(meta.get("file")),
            sample=rec.sample or 0,
        )
    )


def _str(value: Any) -> str | None:
    return str(value) if value is not None else None


def _load_dashboard(acc: _Acc, rec: ProbeRecord, data: bytes) -> None:
    endpoint = ray_state.endpoint_of(str(rec.meta.get("endpoint") or rec.target), rec.target)
    if endpoint is None or endpoint.parse is None:
        return  # kept for the reader (version, cluster status, ...), not analysed
    add = DASHBOARD_LOADERS.get(endpoint.target)
    if add is None:
        acc.blind.append(f"{rec.source} {rec.target}: no loader for {endpoint.path} (a bug)")
        return
    add(acc, rec, endpoint.parse(data))


def _add_actors(acc: _Acc, rec: ProbeRecord, parsed: tuple[Any, ...]) -> None:
    for a in parsed:
        acc.actors[a.actor_id] = a
    acc.ray_seen = True


def _add_running_tasks(acc: _Acc, rec: ProbeRecord, parsed: tuple[Any, ...]) -> None:
    for t in parsed:
        acc.tasks[t.task_id] = t
    acc.running[(rec.sample or 0, rec.started_at)] = {t.task_id for t in parsed}


def _add_nodes(acc: _Acc, rec: ProbeRecord, parsed: tuple[Any, ...]) -> None:
    for n in parsed:
        acc.nodes[n.node_id] = n


def _add_node_summary(acc: _Acc, rec: ProbeRecord, parsed: tuple[Any, ...]) -> None:
    for series in parsed:
        acc.summary_gpus.append(GpuObs(series.node_ip, series, "ray_summary"))


def _add_jobs(acc: _Acc, rec: ProbeRecord, parsed: tuple[Any, ...]) -> None:
    known = {(j.job_id, j.submission_id) for j in acc.jobs}
    acc.jobs.extend(j for j in parsed if (j.job_id, j.submission_id) not in known)


def _add_task_page(acc: _Acc, rec: ProbeRecord, parsed: tuple[Any, ...]) -> None:
    for page in parsed:
        acc.task_pages.append(
            TaskPageObs(rec.target, rec.sample or 0, rec.started_at, page.tasks, page.truncated)
        )
        if page.truncated:
            acc.blind.append(
                f"{rec.source} {rec.target}: partly seen: Ray returned {len(page.tasks)} of "
                f"{page.num_filtered} tasks (an arbitrary subset: it truncates by task id)"
            )


def _add_placement_groups(acc: _Acc, rec: ProbeRecord, parsed: tuple[Any, ...]) -> None:
    for pg in parsed:
        acc.pgs[pg.placement_group_id] = pg


def _add_cluster(acc: _Acc, rec: ProbeRecord, parsed: tuple[Any, ...]) -> None:
    for cluster in parsed:
        acc.cluster[(rec.sample or 0, rec.started_at)] = cluster


# What the loader does with each parsed dashboard answer, by ray_state.STATE_ENDPOINTS target
# (tests/unit/test_source_tables.py: every endpoint with a parser has one).
DASHBOARD_LOADERS: dict[str, Callable[[_Acc, ProbeRecord, tuple[Any, ...]], None]] = {
    "actors": _add_actors,
    "tasks_running": _add_running_tasks,
    "nodes": _add_nodes,
    "node_summary": _add_node_summary,
    "jobs": _add_jobs,
    "tasks_unfinished": _add_task_page,
    ray_state.TASK_HISTORY.target: _add_task_page,
    "placement_groups": _add_placement_groups,
    "cluster_status": _add_cluster,
}


def _load_stack(acc: _Acc, rec: ProbeRecord, data: bytes) -> None:
    sample = rec.sample or 0
    pid = _int(rec.meta.get("pid"))
    via = "dashboard" if rec.source == b.DASHBOARD_TRACEBACK else "pyspy"
    if rec.meta.get("format", "json" if via == "pyspy" else "text") == "json":
        stack = pyspy.parse_pyspy_json(_text(data), pid)
        acc.stacks.append(StackObs(rec.node_ip, stack.pid, sample, stack, via))
        return
    for stack in pyspy.parse_pyspy_text(_text(data)):
        acc.stacks.append(StackObs(rec.node_ip, stack.pid, sample, stack, via))


def _load_http(acc: _Acc, rec: ProbeRecord, data: bytes | None) -> None:
    meta = rec.meta
    path = str(meta.get("path") or "")
    answer = HttpAnswer(
        url=str(meta.get("url") or rec.target),
        path=path,
        status=_int(meta.get("status")),
        elapsed_s=_float(meta.get("elapsed_s")) or rec.elapsed_s or 0.0,
        outcome=rec.outcome,
        error=meta.get("error") or (rec.reason if rec.outcome is not Outcome.OK else None),
        sent=meta.get("not_sent") is not True,
    )
    parsed: Parsed = None
    parse_error = None
    if rec.outcome is not Outcome.OK and not meta.get("fallback"):
        reason = f": {rec.reason}" if rec.reason else ""
        acc.blind.append(f"{rec.source} {answer.url}{path}: {rec.outcome.value}{reason}")
    if rec.outcome is Outcome.OK and rec.artifact and data is None:
        acc.blind.append(f"{rec.source} {rec.target}: artefact missing from the bundle")
    parser = sglang.PARSER_BY_PATH.get(path)
    if parser is not None and data is not None and answer.status == 200:
        try:
            parsed = parser(data)
        except ParseError as exc:
            parse_error = str(exc)
        except Exception as exc:  # noqa: BLE001 - untrusted bytes: a blind spot, never a crash
            parse_error = f"{type(exc).__name__}: {exc}"[:300]
        if parse_error is not None:
            acc.blind.append(f"{rec.source} {answer.url}{path}: could not parse: {parse_error}")
    kind = "router" if rec.source == b.ROUTER else "engine"
    acc.http.append(HttpObs(kind, rec.sample or 0, answer, parsed, parse_error))


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _int(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _float(value: Any) -> float | None:
    """A number of a record's meta, None where a damaged bundle holds anything else."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        number = float(value)
    except (ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


# The registry: what the loader does with an ok record of each source (bundle.SOURCES), in one place.
# A new source adds its loader here (tests/unit/test_source_tables.py checks that none is missing).
SOURCE_LOADERS: dict[str, Callable[[_Acc, ProbeRecord, bytes], None]] = {
    b.RAY_DASHBOARD: _load_dashboard,
    b.PROCESSES: _load_processes,
    b.PYSPY: _load_stack,
    b.DASHBOARD_TRACEBACK: _load_stack,
    b.NVML: _load_nvml,
    b.GPM: _load_gpm,
    b.NCCL_RAS: _load_ras,
    b.FLIGHT_RECORDER: _load_flight_recorder,
    b.RAY_LOGS: _load_log,
    b.SOCKETS: _load_sockets,
    b.KERNEL: _load_kernel,
    b.ACTOR_LOG_HEAD: _load_log_head,
}
# HTTP answers of engines and routers are read whatever their outcome (a refused connection, a
# timeout and a 503 are evidence too).
HTTP_SOURCES = frozenset({b.SGLANG, b.ROUTER})
