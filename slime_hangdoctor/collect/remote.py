"""Reach the other nodes through Ray itself: one long-lived probe per node, pinned to it.

The doctor connects as a short-lived Ray driver (its own namespace, no logs forwarded), in a
thread of its own that starts as soon as the first sample's Ray state names another slime node,
while this node's own sample runs. Each other node then gets one probe: a threaded actor with
hard node affinity and zero CPUs (a busy node still takes it), created once and asked for both
samples and for the GPU readings over the window; each node's first sample is asked for as soon as
the driver is connected. The probes die with the driver (none is detached): nothing is left
behind. Our own package travels with the probe as its sources (`probe_boot`: no runtime env, so a worker
the raylet keeps idle can take the probe), so the node runs the same code as the CLI, and its
options travel without a secret (`node_options`).

**A node's answer is data, never code** (docs/reliability.md, TM17). A probe answers plain bytes
(msgpack: records, artefacts, suffixes), which Ray stores as a raw object; the doctor reads the
raw object's bytes (`_raw_answer`) and never `ray.get`s it: Ray would unpickle whatever a
compromised node put there. An answer that is anything but raw bytes (a pickled object, an error
object) is not read: its node becomes a blind spot that says so, with Ray's error type where the
object's metadata names one. A node whose probe fails or times out becomes a named blind spot;
its stacks may still come from the dashboard's /worker/traceback.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import functools
import importlib
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slime_hangdoctor.bundle import BundleWriter, ProbeRecord, safe_suffix
from slime_hangdoctor.collect.node import run_detached_sample
from slime_hangdoctor.collect.node_probe import NodeSpec
from slime_hangdoctor.collect.options import CollectOptions, Deadline
from slime_hangdoctor.outcome import Outcome
from slime_hangdoctor.parsers.nvml import GPM, NVML
from slime_hangdoctor.parsers.processes import PROCESSES
from slime_hangdoctor.sources import SPECS

NAMESPACE = "slime-hangdoctor"
# Ray's metadata of a raw (bytes) object: ray._private.ray_constants.OBJECT_METADATA_TYPE_RAW
RAW_METADATA = b"RAW"

Exported = list[tuple[dict[str, Any], bytes | None, str]]


@dataclass(frozen=True)
class RemoteNode:
    node_id: str
    node_ip: str


class NodeProbe:
    """One node's probe, run there as a threaded Ray actor: its samples and its GPU readings, each
    answered as plain bytes (`pack_answer`).

    The samples are taken one after the other, in their order, whatever order the actor's threads
    pick the calls up in (a probe that starts late is asked for both at once): two py-spy dumps of
    one process at the same time fail (ptrace allows one tracer), and a second sample taken
    before the first would turn the comparison around. `first_sample`: the sample the probe was
    created for (a node first seen at the second sample waits for no first)."""

    def __init__(self, first_sample: int = 0) -> None:
        self._next = first_sample
        self._turn = threading.Condition()

    def sample(self, spec: NodeSpec, opts: CollectOptions, budget_s: float) -> bytes:
        t0 = time.monotonic()
        with self._turn:  # bounded: a sample before it that never ends does not stop this one
            self._turn.wait_for(lambda: self._next >= spec.sample, timeout=budget_s / 2)
        left = max(0.5, budget_s - (time.monotonic() - t0))
        try:
            return pack_answer(run_detached_sample(spec, opts, left, gpus=False))
        finally:
            with self._turn:
                self._next = max(self._next, spec.sample + 1)
                self._turn.notify_all()

    def gpus(self, spec: NodeSpec, opts: CollectOptions, budget_s: float, until: float) -> bytes:
        """NVML over the window: until `until` (epoch seconds: the doctor's second sample), so a
        probe that started late still ends with the window, not a window after its start."""
        budget = min(budget_s, max(0.5, until - time.time() + 1.0))  # sampling ends 1 s early
        return pack_answer(run_detached_sample(spec, opts, budget, gpus=True))


def node_options(opts: CollectOptions) -> CollectOptions:
    """The options a node is sent: none of the run's secrets (the API key, Ray's token, URLs
    that may carry credentials). A node's sample needs none; the doctor redacts what comes back
    with its own."""
    return dataclasses.replace(
        opts, api_key=None, ray_token=None, sglang_urls=(), router_urls=(), extra={}
    )


def pack_answer(exported: Exported) -> bytes:
    """A node's records as plain bytes (msgpack: no object of any class, unlike a pickle)."""
    import msgpack

    data: bytes = msgpack.packb([list(item) for item in exported], use_bin_type=True)
    return data


class AnswerRefused(Exception):
    """A node's answer over the bounds of the record format (`read_answer`)."""


@dataclass(frozen=True)
class AnswerBounds:
    """What a node's answer may hold, sized to the record format (`node.export_records`): a list
    of [record, artefact bytes or nil, suffix]; a record is a map of ProbeRecord's fields (10)
    with `meta` a map of a few scalars. Each bound is some ten times what a big node sends."""

    max_bytes: int = 256 * 1024 * 1024  # the whole answer
    max_records: int = 20_000  # a 1000-process node: two per process (stacks, log head) and some
    max_map_len: int = 64  # a record's fields, its meta's keys (at most 12 in every recorded bundle)
    max_array_len: int = 64  # an item [record, bytes, suffix]; no field of a record is a list
    max_str_len: int = 64 * 1024  # a reason, a target, a URL (270 characters at most recorded)
    max_bin_len: int = 64 * 1024 * 1024  # an artefact: the largest cap of a node source's spec
    max_objects: int = 500_000  # maps, lists and what they hold, over the whole answer


ANSWER_BOUNDS = AnswerBounds()
# One node's answer, at most: a sample's stacks, process table
# and logs' heads are a few MiB at most.
MAX_ANSWER_BYTES = ANSWER_BOUNDS.max_bytes


def read_answer(
    data: bytes | memoryview, bounds: AnswerBounds = ANSWER_BOUNDS
) -> tuple[Exported | None, str | None]:
    """The records in a node's answer (untrusted bytes), or why it was not read.

    Bounded before anything is built: the size first; then msgpack's own limits on every
    string, binary, map and list, and a count of the maps and lists and what they hold (every
    container is counted as it is completed, so at most one container per nesting level is
    built uncounted): an answer of 8 MiB of empty maps costs a few MiB, not 578 MB."""
    import io

    import msgpack

    size = len(data)
    if size > bounds.max_bytes:
        return None, f"its answer of {size} bytes is over {bounds.max_bytes} bytes: not read"
    counted = [0]

    def count(obj: Any) -> Any:
        counted[0] += 1 + len(obj)
        if counted[0] > bounds.max_objects:
            raise AnswerRefused(f"more than {bounds.max_objects} objects")
        return obj

    unpacker = msgpack.Unpacker(
        io.BytesIO(data),
        raw=False,
        strict_map_key=True,
        max_buffer_size=bounds.max_bin_len + 1024 * 1024,
        max_str_len=bounds.max_str_len,
        max_bin_len=bounds.max_bin_len,
        max_array_len=bounds.max_array_len,
        max_map_len=bounds.max_map_len,
        max_ext_len=0,
        object_hook=count,
        list_hook=count,
    )
    try:
        out = _read_items(unpacker, bounds)
        if unpacker.tell() != size:
            raise AnswerRefused("bytes after its last record")
    except AnswerRefused as exc:
        return None, f"its answer of {size} bytes is over the bounds of a node's records ({exc}): not read"
    except Exception as exc:  # noqa: BLE001 - malformed bytes of any kind are not an answer
        why = f"{type(exc).__name__}: {exc}"[:200]
        return None, f"its answer of {size} bytes is not a list of records ({why}): not read"
    return out, None


def _read_items(unpacker: Any, bounds: AnswerBounds) -> Exported:
    n = unpacker.read_array_header()
    if n > bounds.max_records:
        raise AnswerRefused(f"{n} records, more than {bounds.max_records}")
    out: Exported = []
    for _ in range(n):
        if unpacker.read_array_header() != 3:
            raise ValueError("an item is not [record, bytes, suffix]")
        rec, blob, suffix = unpacker.unpack(), unpacker.unpack(), unpacker.unpack()
        if isinstance(rec, dict):
            out.append((rec, blob if isinstance(blob, bytes) else None, str(suffix)[:64]))
    return out


def unpack_answer(data: bytes | memoryview) -> Exported | None:
    """The records in a node's answer (untrusted bytes); None when they are not one."""
    return read_answer(data)[0]


@functools.cache
def package_sources() -> dict[str, tuple[bytes, bool]]:
    """The doctor's own package as the node's import system is served it (probe_boot): module
    name -> (source, whether it is a package), read from the files the CLI runs."""
    import slime_hangdoctor

    root = Path(slime_hangdoctor.__file__).parent
    out: dict[str, tuple[bytes, bool]] = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        package = parts[-1] == "__init__"
        out[".".join(parts[:-1] if package else parts)] = (path.read_bytes(), package)
    return out


class RayTasks:
    """The doctor's Ray driver, connected in a thread, and one probe per node (created once)."""

    def __init__(self, gcs_address: str | None, timeout_s: float) -> None:
        self.gcs_address = gcs_address
        self._ready = threading.Event()
        self._error: str | None = None
        self._probe_class: Any = None
        self._sources: Any = None  # the package's sources, in the object store (package_sources)
        self._probes: dict[RemoteNode, Any] = {}
        self._lock = threading.Lock()
        self._thread = threading.Thread(
            target=self._connect, args=(timeout_s,), daemon=True, name="ray-connect"
        )
        self._thread.start()

    def _connect(self, timeout_s: float) -> None:
        try:
            _wait_closed()  # a run before this one in this process (`watch`) may still disconnect
            if not self.gcs_address:
                raise RuntimeError("the GCS address of the cluster is unknown (give host:6379)")
            import ray

            from slime_hangdoctor.collect import probe_boot

            cloudpickle: Any = importlib.import_module("ray.cloudpickle")  # untyped

            sources = package_sources()
            if not ray.is_initialized():
                ray.init(
                    address=self.gcs_address,
                    namespace=NAMESPACE,
                    logging_level=logging.ERROR,
                    log_to_driver=False,
                    configure_logging=False,
                )
            cloudpickle.register_pickle_by_value(probe_boot)
            self._sources = ray.put(sources)
            # an actor class (the stubs of ray.remote type the function form only)
            actor: Any = ray.remote
            self._probe_class = actor(
                num_cpus=0, max_concurrency=4, max_restarts=0, max_task_retries=0
            )(probe_boot.BootProbe)
        except Exception as exc:  # noqa: BLE001 - any failure is a blind spot, never a crash
            self._error = f"could not connect to Ray as a driver: {type(exc).__name__}: {exc}"[:400]
        finally:
            self._ready.set()

    def ready(self, timeout: float) -> str | None:
        """None when connected, else why not."""
        if not self._ready.wait(timeout):
            return "connecting to Ray as a driver took too long"
        return self._error

    def probe(self, node: RemoteNode, first_sample: int = 0) -> Any:
        """The node's probe, created (pinned to it) on first use, for `first_sample`."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        with self._lock:
            handle = self._probes.get(node)
            if handle is None:
                strategy = NodeAffinitySchedulingStrategy(node_id=node.node_id, soft=False)
                handle = self._probe_class.options(scheduling_strategy=strategy).remote(
                    first_sample, self._sources
                )
                self._probes[node] = handle
            return handle

    def submit(
        self,
        node: RemoteNode,
        spec: NodeSpec,
        opts: CollectOptions,
        budget_s: float,
        gpus: bool,
        until: float | None = None,
    ) -> Any:
        """Ask the node's probe for a sample, or (`gpus`) for its GPU readings until `until`
        (epoch seconds; default: `budget_s` from now)."""
        probe = self.probe(node, spec.sample)
        if gpus:
            end = time.time() + budget_s if until is None else until
            return probe.gpus.remote(spec, node_options(opts), budget_s, end)
        return probe.sample.remote(spec, node_options(opts), budget_s)

    def fetch(self, ref: Any, timeout: float) -> tuple[Exported | None, str | None]:
        """A node's records, read from the raw bytes of its answer (never unpickled), or why not."""
        data, error, running = _raw_answer(ref, timeout)
        if running:
            # only a task still running is cancelled: cancelling one whose answer arrived races
            # Ray's own completion of it, which ends the process (a failed check in Ray 2.60's
            # TaskManager::CompletePendingTask, "Tried to complete task that was not pending")
            _cancel(ref)
        if data is None:
            return None, error
        return read_answer(data)

    def close_soon(self) -> None:
        """`close` in a thread of its own, once nothing more is asked of the nodes: the run's
        analysis goes on meanwhile (killing the probes and disconnecting take a few tenths of a
        second); the interpreter waits for it before it exits (not a daemon), and the next
        connection in this process waits for it first."""
        global _CLOSING
        thread = threading.Thread(target=self.close, name="ray-close", daemon=False)
        with _CLOSING_LOCK:
            _CLOSING = thread
        thread.start()

    def close(self) -> None:
        self._thread.join(timeout=0.1)
        if self._probe_class is None:
            return
        try:
            import ray

            for handle in self._probes.values():
                try:
                    ray.kill(handle, no_restart=True)
                except Exception:  # noqa: BLE001 - the driver's end kills it anyway
                    pass
            ray.shutdown()
        except Exception:  # noqa: BLE001
            pass


_CLOSING: threading.Thread | None = None  # the last RayTasks.close_soon's
_CLOSING_LOCK = threading.Lock()


def _wait_closed(timeout: float = 10.0) -> None:
    with _CLOSING_LOCK:
        thread = _CLOSING
    if thread is not None:
        thread.join(timeout=timeout)


def _raw_answer(ref: Any, timeout: float) -> tuple[bytes | None, str | None, bool]:
    """The bytes of a raw object (a node's answer), read without deserialising it; else why not;
    and whether its task may still run (no answer in time: the one case to cancel it).

    `ray.get` deserialises by the object's own metadata, which its writer chose: a `PYTHON`
    object is unpickled. The core worker's `get_objects` returns the serialised object (data,
    metadata) as stored; only `RAW` (what Ray stores for a `bytes` return value) is read."""
    import ray

    ray_worker: Any = importlib.import_module("ray._private.worker")  # the core worker: untyped
    try:
        core = ray_worker.global_worker.core_worker
        (got,) = core.get_objects([ref], int(max(0.1, timeout) * 1000))
        data, metadata = got[0], got[1]
    except ray.exceptions.GetTimeoutError:
        return None, "no answer in time", True
    except Exception as exc:  # noqa: BLE001 - a dead owner, a lost object, ...
        text = str(exc).splitlines()[0] if str(exc) else ""
        return None, f"{type(exc).__name__}: {text}"[:300], False
    kind = bytes(metadata or b"").split(b",")[0]
    if kind == RAW_METADATA:
        size = 0 if data is None else len(data)
        if size > MAX_ANSWER_BYTES:  # (before the copy)
            return None, f"its answer of {size} bytes is over {MAX_ANSWER_BYTES} bytes: not read", False
        return (b"" if data is None else data.to_pybytes()), None, False
    return None, _not_raw(kind, data), False


def _not_raw(kind: bytes, data: Any) -> str:
    """Why an answer that is not raw bytes was not read, in Ray's words where it has some."""
    if not kind.isdigit():
        shown = kind.decode("ascii", "replace")[:24] or "none"
        return (
            f"the node answered a serialised object (Ray metadata {shown!r}), not bytes: not read"
        )
    error_types: Any = importlib.import_module("ray.core.generated.common_pb2").ErrorType
    try:
        name = error_types.Name(int(kind))
    except ValueError:
        name = f"error type {int(kind)}"
    return f"{name}{_error_message(kind, data)}"


def _error_message(kind: bytes, data: Any) -> str:
    """The message of Ray's own error info (a protobuf, msgpack-framed), where it has one: read
    through Ray's deserialiser for error metadata, which unpickles nothing for a numeric kind."""
    if data is None:
        return ""
    try:
        ray_worker: Any = importlib.import_module("ray._private.worker")
        context = ray_worker.global_worker.get_serialization_context()
        info = context._deserialize_error_info(data, [kind])
        text = str(info.error_message or "").splitlines()
    except Exception:  # noqa: BLE001 - an error object with no readable info: its type says it
        return ""
    return f": {text[0][:240]}" if text else ""


def _cancel(ref: Any) -> None:
    try:
        import ray

        ray.cancel(ref)
    except Exception:  # noqa: BLE001
        pass


@dataclass(frozen=True)
class Asked:
    """What the doctor asked a node for: its records are filed under that node, at that sample
    (None: the GPU readings over the window), and only those of these sources are kept."""

    node: RemoteNode
    sample: int | None
    sources: frozenset[str]


# The sources of a node's sample (its process scan and every node probe: collect/node.py) and of
# its GPU readings (sample_gpus_over): a record of any other source from a node is not kept.
SAMPLE_SOURCES = frozenset({PROCESSES, *(s.name for s in SPECS if s.node_probe is not None)})
GPU_SOURCES = frozenset({NVML, GPM})


def add_exported(writer: BundleWriter, exported: Exported, asked: Asked) -> int:
    """Re-add a remote node's records (and bytes) to the main bundle; returns how many.

    A node's answer is untrusted input. Each record is filed under the node that answered (its IP
    and node id, whatever the record claims), at the sample that was asked; a record of a source
    the call does not produce is dropped, and the node gets a blind spot that says so. Its
    record's source, target and node become safe file names (BundleWriter), and so does its
    artefact suffix; a suffix that had to be changed is said in the record's reason. Nothing it
    says can place a file outside the bundle, or file evidence as another node's."""
    n = 0
    unknown: dict[str, int] = {}
    for item in exported:
        try:
            rec_json, data, suffix = item
            rec = ProbeRecord.from_json(rec_json)
        except Exception:  # noqa: BLE001 - a malformed record from a node is skipped
            continue
        if rec.source not in asked.sources:
            unknown[rec.source] = unknown.get(rec.source, 0) + 1
            continue
        if not isinstance(data, (bytes, str)):
            data = None
        suffix = suffix if isinstance(suffix, str) else ""
        writer.add(_filed(rec, asked, data, suffix), data, suffix=suffix)
        n += 1
    if unknown:
        names = ", ".join(f"{name[:40]!r} ({k})" for name, k in sorted(unknown.items())[:5])
        why = f"it answered {sum(unknown.values())} records of sources it was not asked for, not kept: {names}"
        node_blind_spot(writer, asked.node, asked.sample, why)
    return n


def _filed(rec: ProbeRecord, asked: Asked, data: object, suffix: str) -> ProbeRecord:
    """The record as the doctor files it: under the node that answered, at the sample asked."""
    notes = [rec.reason] if rec.reason else []
    if data is not None and safe_suffix(suffix) != suffix:
        notes.append(
            f"the node's artefact suffix {suffix[:80]!r} was unsafe: saved as {safe_suffix(suffix)!r}"
        )
    if rec.node_ip != asked.node.node_ip or rec.sample != asked.sample:
        claimed = f"node {str(rec.node_ip)[:64]!r}, sample {rec.sample!r}"
        notes.append(f"the record claimed {claimed}: filed under the node that answered")
    meta = {**rec.meta, "node_id": asked.node.node_id}
    return dataclasses.replace(
        rec,
        artifact=None,
        reason="; ".join(notes) or None,
        node_ip=asked.node.node_ip,
        sample=asked.sample,
        meta=meta,
    )


@dataclass(frozen=True)
class Call:
    """A node request under way: what was asked, and the future of its Ray object ref (set once
    the driver is connected and the call is made; an exception's text is why it could not be)."""

    asked: Asked
    future: cf.Future[Any]

    @property
    def node(self) -> RemoteNode:
        return self.asked.node


Started = list[Call]


def collect_remote(
    tasks: RayTasks,
    nodes: list[tuple[RemoteNode, NodeSpec]],
    opts: CollectOptions,
    deadline: Deadline,
    *,
    gpus: bool = False,
    budget_s: float | None = None,
    until: float | None = None,
) -> Started:
    """Ask each node's probe for a sample (or its GPU readings), without waiting: the calls are
    made in a thread as soon as the driver is connected (the caller samples its own node
    meanwhile). Returns the calls (node, what was asked, future of the call's ref); gather_remote
    waits for them."""
    sources = GPU_SOURCES if gpus else SAMPLE_SOURCES
    started: Started = [
        Call(Asked(node, None if gpus else spec.sample, sources), cf.Future())
        for node, spec in nodes
    ]
    if not nodes:
        return started

    def send() -> None:
        # (nothing waits on this thread: the connection may take what the run's deadline allows)
        problem = tasks.ready(deadline.clamp(opts.window_s + opts.probe_timeout_s * 3))
        budget = (
            budget_s if budget_s is not None else deadline.clamp(opts.probe_timeout_s * 2 + 2.0)
        )
        for (node, spec), call in zip(nodes, started, strict=True):
            future = call.future
            if problem is not None:
                future.set_exception(RuntimeError(problem))
                continue
            try:
                future.set_result(tasks.submit(node, spec, opts, budget, gpus, until))
            except Exception as exc:  # noqa: BLE001
                future.set_exception(RuntimeError(f"could not ask its probe: {exc}"[:300]))

    threading.Thread(target=send, name="ray-submit", daemon=True).start()
    return started


def gather_remote(
    tasks: RayTasks,
    writer: BundleWriter,
    started: Started,
    sample: int | None,
    deadline: Deadline,
    wait_s: float,
) -> list[RemoteNode]:
    """Wait (bounded) for started calls; add their evidence; returns the nodes that failed."""
    failed: list[RemoteNode] = []

    end = time.monotonic() + deadline.clamp(wait_s)

    def one(call: Call) -> None:
        node = call.node
        try:
            ref = call.future.result(timeout=max(0.05, end - time.monotonic()))
        except cf.TimeoutError:
            error: str | None = "connecting to Ray as a driver took too long"
            exported = None
        except Exception as exc:  # noqa: BLE001 - the call could not be made: why is the text
            error, exported = str(exc), None
        else:
            exported, error = tasks.fetch(ref, max(0.1, end - time.monotonic()))
        if exported is None:
            node_blind_spot(writer, node, sample, error or "no answer")
            failed.append(node)
        else:
            add_exported(writer, exported, call.asked)

    if started:
        with cf.ThreadPoolExecutor(max_workers=min(32, len(started))) as pool:
            list(pool.map(one, started))
    return failed


def node_blind_spot(writer: BundleWriter, node: RemoteNode, sample: int | None, why: str) -> None:

    writer.add(
        ProbeRecord(
            PROCESSES,
            f"node {node.node_ip}",
            Outcome.UNAVAILABLE,
            f"node {node.node_ip} ({node.node_id[:12]}) not inspected: {why}",
            node_ip=node.node_ip,
            sample=sample,
            started_at=time.time(),
            meta={"node_id": node.node_id},
        )
    )
