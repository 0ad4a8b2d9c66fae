"""Bundle -> Snapshot: run each record's parser; a record that fails to parse becomes a blind spot."""

from __future__ import annotations

import math
import os
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from slime_hangdoctor import bundle as bundle_format
from slime_hangdoctor.bundle import Bundle, ProbeRecord
from slime_hangdoctor.errors import ParseError
from slime_hangdoctor.facts import (
    ClusterResources,
    ObjectStoreUsage,
    RayActor,
    RayJob,
    RayNode,
    RayPlacementGroup,
    RayTask,
)
from slime_hangdoctor.http_facts import HttpAnswer
from slime_hangdoctor.outcome import Outcome
from slime_hangdoctor.parsers import (
    nvml,
    pyspy,
    ray_state,
    sglang,
)
from slime_hangdoctor.parsers.logs import parse_log_tail
from slime_hangdoctor.snapshot import (
    GpuObs,
    GpuVia,
    HttpObs,
    HttpPeer,
    LogObs,
    LogOwner,
    Parsed,
    Snapshot,
    StackObs,
    StackVia,
    TaskPageObs,
)
from slime_hangdoctor.source_spec import Observed, SourceSpec
from slime_hangdoctor.sources import BY_NAME

_T = TypeVar("_T")


class _Loading:
    """What the loader has filed so far (mutable, used only while loading one bundle)."""

    def __init__(self, cache: ParseCache | None = None) -> None:
        self.cache = cache
        self.actors: dict[str, RayActor] = {}
        self.tasks: dict[str, RayTask] = {}
        # task ids of each running-tasks answer, by (sample, time): the newest one says what still runs
        self.running: dict[tuple[int, float], set[str]] = {}
        self.nodes: dict[str, RayNode] = {}
        self.jobs: list[RayJob] = []
        self.stacks: list[StackObs] = []
        self.http: list[HttpObs] = []
        self.gpus: list[GpuObs] = []
        self.logs: list[LogObs] = []
        self.summary_gpus: list[GpuObs] = []
        self.task_pages: list[TaskPageObs] = []
        self.pgs: dict[str, RayPlacementGroup] = {}
        self.cluster: dict[tuple[int, float], ClusterResources] = {}
        self.object_stores: dict[tuple[int, float], tuple[ObjectStoreUsage, ...]] = {}
        self.observed: list[Observed[Any]] = []
        self.blind: list[str] = []
        self.ray_seen = False

    def parse(self, rec: ProbeRecord, parser: str, parse: Callable[[], _T]) -> _T:
        """`parse()`, through the cache where there is one."""
        if self.cache is None:
            return parse()
        return self.cache.parsed(rec.artifact, parser, parse)


class ParseCache:
    """The artefacts of a bundle that is still being written, each read and parsed once.

    While collecting, discovery re-reads what the writer holds after each step (Ray state, the
    process tables, the routers' answers), and the analysis then reads it all again; an artefact
    never changes once written, so its bytes and each parser's result (or error) are kept by
    artefact name. Only for the writer's own bundle (collect/node.py `parse_cache`): an untrusted
    bundle is read through the parse budget, with no cache. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._data: dict[str, bytes] = {}
        self._parsed: dict[tuple[str, str], _Parsed] = {}

    def data(self, artifact: str) -> bytes | None:
        with self._lock:
            return self._data.get(artifact)

    def keep(self, artifact: str, data: bytes) -> None:
        with self._lock:
            self._data[artifact] = data

    def parsed(self, artifact: str | None, parser: str, parse: Callable[[], _T]) -> _T:
        """`parse()`'s result for this artefact and parser, from the cache after the first call
        (an exception it raised is raised again)."""
        if artifact is None:
            return parse()
        key = (artifact, parser)
        with self._lock:
            hit = self._parsed.get(key)
        if hit is None:
            try:
                hit = _Parsed(parse(), None)
            except Exception as exc:  # noqa: BLE001 - kept, and raised again below
                hit = _Parsed(None, exc)
            with self._lock:
                self._parsed[key] = hit
        if hit.error is not None:
            raise hit.error
        value: _T = hit.value
        return value


@dataclass(frozen=True)
class _Parsed:
    value: Any
    error: Exception | None


def load_snapshot(bundle: Bundle, cache: ParseCache | None = None) -> Snapshot:
    """Parse every artefact of `bundle`; never raises for a bad artefact (it becomes a blind spot).

    A bundle given to `analyse` is untrusted: what is parsed is capped before it is read (an
    artefact over its source's cap, one that an earlier record already named, and everything
    past MAX_PARSE_COST are blind spots, not parsed). `cache`: the collector's own bundle only."""
    acc = _Loading(cache)
    budget = _Budget()
    for rec in bundle.manifest.probes:
        wanted = rec.source in HTTP_SOURCES or rec.outcome is Outcome.OK
        kept = cache.data(rec.artifact) if cache is not None and wanted and rec.artifact else None
        refused = budget.admit(bundle, rec) if wanted and rec.artifact and kept is None else None
        data = kept or (bundle.read(rec) if wanted and refused is None else None)
        if data is not None and kept is None:
            refused = budget.charge(data)
            if cache is not None and refused is None and rec.artifact:
                cache.keep(rec.artifact, data)
        if refused is not None:
            acc.blind.append(f"{rec.source} {rec.target}: not parsed: {refused}")
            data = None
        if rec.source in HTTP_SOURCES:
            _load_http(acc, rec, data, body_refused=refused is not None)
            continue
        if rec.outcome is not Outcome.OK:
            acc.blind.append(describe_failure(rec))
            continue
        spec = BY_NAME.get(rec.source)
        if rec.reason and spec is not None and spec.partial:
            acc.blind.append(f"{rec.source} {rec.target}: partly seen: {rec.reason}")
        if refused is not None:
            continue
        if data is None:
            acc.blind.append(f"{rec.source} {rec.target}: artefact missing from the bundle")
            continue
        try:
            if spec is not None and spec.parse is not None:
                _file(acc, spec, rec, data)
            elif (loader := COMPOSITE_LOADERS.get(rec.source)) is not None:
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
        stacks=tuple(acc.stacks),
        http=tuple(acc.http),
        gpus=tuple(acc.gpus),
        logs=tuple(acc.logs),
        task_pages=tuple(sorted(acc.task_pages, key=lambda p: (p.sample, p.time))),
        placement_groups=tuple(acc.pgs.values()),
        cluster=acc.cluster[max(acc.cluster)] if acc.cluster else None,
        object_stores=acc.object_stores[max(acc.object_stores)] if acc.object_stores else (),
        observed=tuple(acc.observed),
        blind_spots=tuple(dict.fromkeys(acc.blind)),
        ray_seen=acc.ray_seen,
    )


# What one bundle may make the loader parse. Parsing costs more than the bytes: each JSON object
# becomes a dict, and most become a fact that the analysis keeps (16 MiB of `{"pid": N}` rows took
# 809 MiB and 22 s). An artefact costs its length plus OBJECT_COST per `{` in it. The budget holds
# a big cluster's bundle (a recorded demo bundle costs at most 2.1 MiB) and bounds a crafted one.
_MiB = 1024 * 1024
MAX_PARSE_COST = 128 * _MiB
OBJECT_COST = 256


class _Budget:
    """The parse budget of one bundle, and the artefacts that records have already named."""

    def __init__(self) -> None:
        self.spent = 0
        self.seen: set[tuple[int, int]] = set()

    def admit(self, bundle: Bundle, rec: ProbeRecord) -> str | None:
        """Why `rec`'s artefact is not to be read, or None. A record that names a file an earlier
        record named is refused (eight records on one 4 MiB artefact took 959 MiB and 61 s)."""
        try:
            path = (bundle.root / str(rec.artifact)).resolve()
            if bundle.real_root not in path.parents:
                return None  # outside the bundle: Bundle.read never reads it
            st = os.stat(path)
        except (OSError, ValueError, RuntimeError):
            return None  # missing: Bundle.read says so
        if not stat.S_ISREG(st.st_mode):
            return None  # Bundle.read refuses it
        key = (st.st_dev, st.st_ino)
        if key in self.seen:
            return "its artefact is another record's (a manifest of ours never shares one)"
        self.seen.add(key)
        spec = BY_NAME.get(rec.source)
        cap = spec.max_bytes if spec is not None else 64 * _MiB
        if st.st_size > cap:
            return f"its artefact is {st.st_size} bytes, over the {cap} bytes kept for {rec.source}"
        if self.spent + st.st_size > MAX_PARSE_COST:
            return self.exhausted()
        return None

    def charge(self, data: bytes) -> str | None:
        """Spend what parsing `data` costs; why not, when it would go over the budget."""
        cost = len(data) + OBJECT_COST * data.count(b"{")
        if self.spent + cost > MAX_PARSE_COST:
            return self.exhausted()
        self.spent += cost
        return None

    @staticmethod
    def exhausted() -> str:
        return (
            f"parse budget exhausted ({MAX_PARSE_COST // _MiB} MiB a bundle, each JSON object "
            f"counted as {OBJECT_COST} bytes)"
        )


def describe_failure(rec: ProbeRecord) -> str:
    """One line for a probe that did not end ok."""
    reason = f": {rec.reason}" if rec.reason else ""
    return f"{rec.source} {rec.target}: {rec.outcome.value}{reason}"


def _file(acc: _Loading, spec: SourceSpec[Any], rec: ProbeRecord, data: bytes) -> None:
    """Parse one ok record of `spec`'s source into its fact, and the blind spots the fact shows."""
    assert spec.parse is not None
    parse = spec.parse
    fact = acc.parse(rec, spec.name, lambda: parse(data, rec))
    acc.observed.append(Observed(spec.name, rec.node_ip, rec.sample or 0, fact, rec.started_at))
    if spec.notes is not None:
        acc.blind.extend(spec.notes(fact, rec.node_ip or "this node"))


def _load_nvml(acc: _Loading, rec: ProbeRecord, data: bytes) -> None:
    series = acc.parse(rec, bundle_format.NVML, lambda: nvml.parse_nvml_series(_text(data)))
    acc.gpus.append(GpuObs(rec.node_ip, series))


def _load_log(acc: _Loading, rec: ProbeRecord, data: bytes) -> None:
    meta = rec.meta
    offset = _int(meta.get("utc_offset_s")) or 0
    tail = acc.parse(rec, bundle_format.RAY_LOGS, lambda: parse_log_tail(_text(data), offset))
    acc.logs.append(
        LogObs(
            kind=LogOwner.DRIVER if meta.get("kind") == LogOwner.DRIVER.value else LogOwner.ACTOR,
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


def _str(value: Any) -> str | None:
    return str(value) if value is not None else None


def _load_dashboard(acc: _Loading, rec: ProbeRecord, data: bytes) -> None:
    endpoint = ray_state.endpoint_of(str(rec.meta.get("endpoint") or rec.target), rec.target)
    if endpoint is None or endpoint.parse is None:
        return  # kept for the reader (version, cluster status, ...), not analysed
    add = DASHBOARD_LOADERS.get(endpoint.target)
    if add is None:
        acc.blind.append(f"{rec.source} {rec.target}: no loader for {endpoint.path} (a bug)")
        return
    parse = endpoint.parse
    add(acc, rec, acc.parse(rec, endpoint.target, lambda: parse(data)))


def _add_actors(acc: _Loading, rec: ProbeRecord, parsed: tuple[Any, ...]) -> None:
    for a in parsed:
        acc.actors[a.actor_id] = a
    acc.ray_seen = True


def _add_running_tasks(acc: _Loading, rec: ProbeRecord, parsed: tuple[Any, ...]) -> None:
    for t in parsed:
        acc.tasks[t.task_id] = t
    acc.running[(rec.sample or 0, rec.started_at)] = {t.task_id for t in parsed}


def _add_nodes(acc: _Loading, rec: ProbeRecord, parsed: tuple[Any, ...]) -> None:
    for n in parsed:
        acc.nodes[n.node_id] = n


def _add_node_summary(acc: _Loading, rec: ProbeRecord, parsed: tuple[Any, ...]) -> None:
    stores: list[ObjectStoreUsage] = []
    for item in parsed:
        if isinstance(item, ObjectStoreUsage):
            stores.append(item)
        else:
            acc.summary_gpus.append(GpuObs(item.node_ip, item, GpuVia.RAY_SUMMARY))
    acc.object_stores[(rec.sample or 0, rec.started_at)] = tuple(stores)


def _add_jobs(acc: _Loading, rec: ProbeRecord, parsed: tuple[Any, ...]) -> None:
    known = {(j.job_id, j.submission_id) for j in acc.jobs}
    acc.jobs.extend(j for j in parsed if (j.job_id, j.submission_id) not in known)


def _add_task_page(acc: _Loading, rec: ProbeRecord, parsed: tuple[Any, ...]) -> None:
    for page in parsed:
        acc.task_pages.append(
            TaskPageObs(rec.target, rec.sample or 0, rec.started_at, page.tasks, page.truncated)
        )
        if page.truncated:
            acc.blind.append(
                f"{rec.source} {rec.target}: partly seen: Ray returned {len(page.tasks)} of "
                f"{page.num_filtered} tasks (an arbitrary subset: it truncates by task id)"
            )


def _add_placement_groups(acc: _Loading, rec: ProbeRecord, parsed: tuple[Any, ...]) -> None:
    for pg in parsed:
        acc.pgs[pg.placement_group_id] = pg


def _add_cluster(acc: _Loading, rec: ProbeRecord, parsed: tuple[Any, ...]) -> None:
    for cluster in parsed:
        acc.cluster[(rec.sample or 0, rec.started_at)] = cluster


# What the loader does with each parsed dashboard answer, by ray_state.STATE_ENDPOINTS target
# (tests/unit/test_source_tables.py: every endpoint with a parser has one).
DASHBOARD_LOADERS: dict[str, Callable[[_Loading, ProbeRecord, tuple[Any, ...]], None]] = {
    "actors": _add_actors,
    "tasks_running": _add_running_tasks,
    "nodes": _add_nodes,
    "node_summary": _add_node_summary,
    "jobs": _add_jobs,
    ray_state.UNFINISHED_TASKS: _add_task_page,
    ray_state.TASK_HISTORY.target: _add_task_page,
    "placement_groups": _add_placement_groups,
    "cluster_status": _add_cluster,
}


def _load_stack(acc: _Loading, rec: ProbeRecord, data: bytes) -> None:
    sample = rec.sample or 0
    pid = _int(rec.meta.get("pid"))
    traceback = rec.source == bundle_format.DASHBOARD_TRACEBACK
    via = StackVia.DASHBOARD if traceback else StackVia.PYSPY
    if rec.meta.get("format", "text" if traceback else "json") == "json":
        stack = acc.parse(rec, "pyspy-json", lambda: pyspy.parse_pyspy_json(_text(data), pid))
        acc.stacks.append(StackObs(rec.node_ip, stack.pid, sample, stack, via))
        return
    for stack in acc.parse(rec, "pyspy-text", lambda: pyspy.parse_pyspy_text(_text(data))):
        acc.stacks.append(StackObs(rec.node_ip, stack.pid, sample, stack, via))


def _load_http(
    acc: _Loading, rec: ProbeRecord, data: bytes | None, *, body_refused: bool = False
) -> None:
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
    # an engine only a router lists (not the job's: topology.Engine.listed_only), probed without
    # the API key: what it did not answer is no blind spot of the job (the verdict reports it)
    listed = rec.source == bundle_format.SGLANG and meta.get("listed_by_router") is True
    if rec.outcome is not Outcome.OK and not meta.get("fallback") and not listed:
        reason = f": {rec.reason}" if rec.reason else ""
        acc.blind.append(f"{rec.source} {answer.url}{path}: {rec.outcome.value}{reason}")
    if rec.outcome is Outcome.OK and rec.artifact and data is None and not body_refused:
        acc.blind.append(f"{rec.source} {rec.target}: artefact missing from the bundle")
    table = (
        sglang.ROUTER_PARSER_BY_PATH
        if rec.source == bundle_format.ROUTER
        else sglang.PARSER_BY_PATH
    )
    parser = table.get(path)
    if parser is not None and data is not None and answer.status == 200:
        try:
            parsed = acc.parse(rec, path, lambda: parser(data))
        except ParseError as exc:
            parse_error = str(exc)
        except Exception as exc:  # noqa: BLE001 - untrusted bytes: a blind spot, never a crash
            parse_error = f"{type(exc).__name__}: {exc}"[:300]
        if parse_error is not None and not listed:
            acc.blind.append(f"{rec.source} {answer.url}{path}: could not parse: {parse_error}")
    kind = (
        HttpPeer.ROUTER
        if rec.source == bundle_format.ROUTER
        else HttpPeer.LISTED
        if listed
        else HttpPeer.ENGINE
    )
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


# What the loader does with an ok record of a composite source (a SourceSpec with no parse); every
# other source is filed by its spec (`_file`). tests/unit/test_source_tables.py checks that every
# spec has one or the other.
COMPOSITE_LOADERS: dict[str, Callable[[_Loading, ProbeRecord, bytes], None]] = {
    bundle_format.RAY_DASHBOARD: _load_dashboard,
    bundle_format.PYSPY: _load_stack,
    bundle_format.DASHBOARD_TRACEBACK: _load_stack,
    bundle_format.NVML: _load_nvml,
    bundle_format.RAY_LOGS: _load_log,
}
# HTTP answers of engines and routers are read whatever their outcome (a refused connection, a
# timeout and a 503 are evidence too).
HTTP_SOURCES = frozenset({bundle_format.SGLANG, bundle_format.ROUTER})
