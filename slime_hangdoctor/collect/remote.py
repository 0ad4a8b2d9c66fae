"""Reach the other nodes through Ray itself: one long-lived probe per node, pinned to it.

The doctor's Ray driver (its own namespace, no logs forwarded) runs in a process of its own
(`collect/ray_driver.py`, started by `RayTasks` as soon as the first sample's Ray state names
another slime node, while this node's own sample runs); the doctor never imports Ray. A failed
check of Ray's core worker, a lost raylet or GCS, or a connect that never returns ends or stalls
that process only: each node it was asked about becomes a blind spot that says why, and the
process is killed at the run's deadline. Each run starts its own (`watch`: nothing of a GCS that
died is reused). Each other node then gets one probe: a threaded actor with hard node affinity and
zero CPUs (a busy node still takes it), created once and asked for both samples and for the GPU
readings over the window; each node's first sample is asked for as soon as the driver is
connected. The probes die with the driver (none is detached): nothing is left behind. Our own
package travels with the probe as its sources (`probe_boot`: no runtime env, so a worker the
raylet keeps idle can take the probe), so the node runs the same code as the CLI, and its options
travel without a secret (`node_options`).

**A node's answer is data, never code** (docs/reliability.md, TM17). A probe answers plain bytes
(msgpack: records, artefacts, suffixes), which Ray stores as a raw object; the driver reads the
raw object's bytes (`ray_driver.raw_answer`) and never `ray.get`s it: Ray would unpickle whatever
a compromised node put there. An answer that is anything but raw bytes (a pickled object, an error
object) is not read: its node becomes a blind spot that says so, with Ray's error type where the
object's metadata names one. The bytes reach the doctor over the driver's pipe and are read
within the bounds of the record format (`read_answer`), and each record is filed under the node
that answered (`add_exported`). A node whose probe fails or times out becomes a named blind spot;
its stacks may still come from the dashboard's /worker/traceback.
"""

from __future__ import annotations

import collections
import concurrent.futures as cf
import dataclasses
import itertools
import os
import pickle
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slime_hangdoctor.bundle import BundleWriter, ProbeRecord, safe_suffix
from slime_hangdoctor.collect.node import run_detached_sample
from slime_hangdoctor.collect.node_probe import NodeSpec
from slime_hangdoctor.collect.nvml import TARGET as GPU_TARGET
from slime_hangdoctor.collect.options import CollectOptions, Deadline
from slime_hangdoctor.collect.ray_driver import MAX_ANSWER_BYTES
from slime_hangdoctor.outcome import Outcome
from slime_hangdoctor.parsers.nvml import GPM, NVML
from slime_hangdoctor.parsers.processes import PROCESSES
from slime_hangdoctor.sources import SPECS

DRIVER_MODULE = "slime_hangdoctor.collect.ray_driver"

Exported = list[tuple[dict[str, Any], bytes | None, str]]
Answer = tuple[bytes | None, str | None]  # a node's answer's bytes, or why there are none


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
    created for (a node first seen at the second sample waits for no first).

    A sample starts at least the window after the one before it began (this node's own clock),
    as far as the call's budget allows: a node whose first sample was late (its probe's worker
    took seconds to start) gets the whole window too, not what was left of the doctor's. Where
    the budget (the run's deadline) allows less, it starts as late as the budget leaves a whole
    sample's time, and the doctor says so (`short_window_spots`)."""

    def __init__(self, first_sample: int = 0) -> None:
        self._next = first_sample
        self._turn = threading.Condition()
        self._began: dict[int, float] = {}  # sample -> when its process scan began (epoch, here)

    def sample(self, spec: NodeSpec, opts: CollectOptions, budget_s: float) -> bytes:
        t0 = time.monotonic()
        with self._turn:  # bounded: a sample before it that never ends does not stop this one
            self._turn.wait_for(lambda: self._next >= spec.sample, timeout=budget_s / 2)
        self._wait_window(spec.sample - 1, opts, t0 + budget_s)
        left = max(0.5, min(sample_budget(opts), budget_s - (time.monotonic() - t0)))
        try:
            called = time.time()
            exported = run_detached_sample(spec, opts, left, gpus=False)
            self._began[spec.sample] = _scan_began(exported, called)
            return pack_answer(exported)
        finally:
            with self._turn:
                self._next = max(self._next, spec.sample + 1)
                self._turn.notify_all()

    def _wait_window(self, last: int, opts: CollectOptions, end: float) -> None:
        """Sleep until a window after sample `last`'s process scan began (if this probe took
        it), or until the call's budget (`end`, monotonic) leaves only a sample's time."""
        began = self._began.get(last)
        if began is None:
            return
        wait = began + opts.window_s - time.time()
        latest = end - sample_budget(opts) - time.monotonic()
        time.sleep(max(0.0, min(wait, latest)))

    def gpus(self, spec: NodeSpec, opts: CollectOptions, budget_s: float, until: float) -> bytes:
        """NVML over the window: until `until` (epoch seconds: the doctor's second sample), so a
        probe that started late still ends with the window, not a window after its start."""
        budget = min(budget_s, max(0.5, until - time.time() + 1.0))  # sampling ends 1 s early
        return pack_answer(run_detached_sample(spec, opts, budget, gpus=True))


def _scan_began(exported: Exported, called: float) -> float:
    """When a sample's process scan began (its record's start, this node's clock): what the two
    samples' window is measured between; `called` where the sample has no scan."""
    starts = [
        float(rec["started_at"])
        for rec, _, _ in exported
        if rec.get("source") == PROCESSES and isinstance(rec.get("started_at"), (int, float))
    ]
    return min(starts, default=called)


def sample_budget(opts: CollectOptions) -> float:
    """The time one node's sample is given (its process scan, its dumps and probes)."""
    return opts.probe_timeout_s * 2 + 2.0


# What a call for a sample after the first is given beyond the window and a sample's time: the
# sample before it begins its scan a little after the call came (a probe asked for both at once)
WINDOW_SLACK_S = 1.0


def call_budget(opts: CollectOptions, sample: int) -> float:
    """The time a node's call for `sample` is given: a sample's, and for a sample after the
    first the window too (the probe may wait for it: NodeProbe)."""
    if sample == 0:
        return sample_budget(opts)
    return sample_budget(opts) + opts.window_s + WINDOW_SLACK_S


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

    max_bytes: int = MAX_ANSWER_BYTES  # the whole answer (checked before Ray's buffer is copied)
    max_records: int = 20_000  # a 1000-process node: two per process (stacks, log head) and some
    max_map_len: int = (
        64  # a record's fields, its meta's keys (at most 12 in every recorded bundle)
    )
    max_array_len: int = 64  # an item [record, bytes, suffix]; no field of a record is a list
    max_str_len: int = 64 * 1024  # a reason, a target, a URL (270 characters at most recorded)
    max_bin_len: int = 64 * 1024 * 1024  # an artefact: the largest cap of a node source's spec
    max_objects: int = 500_000  # maps, lists and what they hold, over the whole answer


ANSWER_BOUNDS = AnswerBounds()


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
        return (
            None,
            f"its answer of {size} bytes is over the bounds of a node's records ({exc}): not read",
        )
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


# The environment the driver's process is given: what Python, Ray and its gRPC need to connect,
# and nothing else of the doctor's (no API key, no cloud or W&B credentials). Ray's own settings
# (RAY_*) travel; the token is set apart (RayTasks: only where it may go to this GCS).
DRIVER_ENV = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "LANG",
        "LC_ALL",
        "LC_CTYPE",
        "TZ",
        "TMPDIR",
        "PYTHONPATH",
        "PYTHONHOME",
        "PYTHONNOUSERSITE",
        "VIRTUAL_ENV",
        "CONDA_PREFIX",
        "LD_LIBRARY_PATH",
    }
)
# Ray's gRPC reads these only where RAY_grpc_enable_http_proxy is on (ray_constants.py): then
# they travel too (they may carry a proxy's password: it is what the connection needs)
PROXY_ENV = frozenset({"http_proxy", "https_proxy", "grpc_proxy", "no_proxy"})
RAY_TOKEN_ENV = ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
# How long the driver's process has to disconnect once the run is done, before it is killed
CLOSE_WAIT_S = 1.0
# A reply's head from the driver's process: a map of three small fields
MAX_HEAD_BYTES = 64 * 1024


def driver_env(environ: Mapping[str, str], token: str | None) -> dict[str, str]:
    """The driver process's environment (DRIVER_ENV), with `token` as Ray's RAY_AUTH_TOKEN; the
    package the CLI runs comes first on its path."""
    import slime_hangdoctor

    env = {k: v for k, v in environ.items() if k in DRIVER_ENV}
    env.update(
        {k: v for k, v in environ.items() if k.startswith("RAY_") and k not in RAY_TOKEN_ENV}
    )
    if environ.get("RAY_grpc_enable_http_proxy", "0").lower() in ("1", "true"):
        env.update({k: v for k, v in environ.items() if k.lower() in PROXY_ENV})
    if token:
        env["RAY_AUTH_TOKEN"] = token
    root = Path(slime_hangdoctor.__file__).parent.parent
    if root.name not in ("site-packages", "dist-packages"):  # (installed: found there anyway)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH")) if p)
    return env


class RayTasks:
    """The doctor's Ray driver for one run, in a process of its own (collect/ray_driver.py),
    started at once; the calls it is asked to make, answered over a pipe.

    Whatever happens to that process (a failed check of Ray's core worker, a lost raylet or GCS
    ending it, a connect that never returns, a kill) costs the nodes it was asked about, each a
    blind spot naming why, never the doctor. It lives until the run's deadline at most
    (`timeout_s`) and is killed then; each run starts its own, so nothing of a GCS that died is
    reused (`watch`). The doctor itself never imports Ray."""

    def __init__(
        self, gcs_address: str | None, timeout_s: float, *, token: str | None = None
    ) -> None:
        self.gcs_address = gcs_address
        self._ready = threading.Event()
        self._error: str | None = None
        self._calls: dict[int, cf.Future[Answer]] = {}
        self._asked: dict[int, tuple[str, int]] = {}  # a sample's call -> (node id, sample)
        self._answered: dict[tuple[str, int], float] = {}  # -> when its answer came (monotonic)
        self._lock = threading.Lock()
        self._outbox: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._ids = itertools.count(1)
        self._stderr: collections.deque[str] = collections.deque(maxlen=8)
        self._proc: subprocess.Popen[bytes] | None = None
        self._gone: str | None = None
        self._closed = False
        self._killer: threading.Timer | None = None
        self._end = time.monotonic() + timeout_s  # the run's deadline: the driver is killed then
        if not gcs_address:
            self._fail(
                "could not connect to Ray as a driver: "
                "the GCS address of the cluster is unknown (give host:6379)"
            )
            return
        try:
            self._start(gcs_address, timeout_s, token)
        except (OSError, subprocess.SubprocessError) as exc:
            self._fail(
                f"could not start the doctor's Ray driver: {type(exc).__name__}: {exc}"[:300]
            )

    def _start(self, gcs_address: str, timeout_s: float, token: str | None) -> None:
        from multiprocessing.connection import Connection

        to_child, from_parent = os.pipe()[::-1]  # (write end, read end)
        from_child, to_parent = os.pipe()
        try:
            self._proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    DRIVER_MODULE,
                    str(from_parent),
                    str(to_parent),
                    f"{max(0.1, timeout_s):.3f}",
                    gcs_address,
                ],
                pass_fds=(from_parent, to_parent),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                env=driver_env(os.environ, token),
            )
        except BaseException:
            for fd in (to_child, from_child):
                os.close(fd)
            raise
        finally:
            for fd in (from_parent, to_parent):
                os.close(fd)
        self._out = Connection(to_child, readable=False)
        self._in = Connection(from_child, writable=False)
        for target in (self._read, self._read_stderr, self._send):
            threading.Thread(target=target, name="ray-driver-pipe", daemon=True).start()
        self._killer = threading.Timer(
            timeout_s + 0.5, self._kill
        )  # the deadline, whatever happens
        self._killer.daemon = True
        self._killer.start()

    def _read(self) -> None:
        """The driver's replies, until its pipe ends: each call's answer goes to its future."""
        import msgpack

        try:
            while True:
                head = msgpack.unpackb(
                    self._in.recv_bytes(MAX_HEAD_BYTES), raw=False, max_str_len=4096, max_map_len=8
                )
                if "ready" in head:
                    self._error = None if head.get("ready") else str(head.get("error"))[:400]
                    self._ready.set()
                    continue
                size = int(head.get("size") or 0)
                data = self._in.recv_bytes(MAX_ANSWER_BYTES) if size else None
                if data is not None and len(data) != size:
                    raise OSError("an answer of another size than announced")
                error = head.get("error")
                self._settle(int(head["id"]), data, None if error is None else str(error)[:400])
        except Exception:  # noqa: BLE001 - EOF, a broken or garbled pipe: the driver is gone
            self._fail(self._why_gone())

    def _send(self) -> None:
        """The calls, in order, to the driver (a thread: a driver that reads nothing, stopped or
        hung, blocks this one once the pipe is full, never the run)."""
        while True:
            message = self._outbox.get()
            if message is None:
                return
            try:
                self._out.send_bytes(message)
            except OSError:
                self._fail(self._why_gone())
                return

    def _read_stderr(self) -> None:
        proc = self._proc
        if proc is None or proc.stderr is None:
            return
        for line in iter(proc.stderr.readline, b""):
            text = line.decode("utf-8", "replace").strip()
            if text:
                self._stderr.append(text[:300])

    def _why_gone(self) -> str:
        """Why the driver's process answers no more: how it ended, and the last it said."""
        proc = self._proc
        if proc is None:
            return "the doctor's Ray driver did not start"
        try:
            code = proc.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            return f"the doctor's Ray driver (pid {proc.pid}) closed its pipe"
        if self._closed:
            return "the run was over"
        how = f"exit code {code}" if code >= 0 else f"killed by {_signal_name(-code)}"
        said = f" (its last words: {self._stderr[-1]})" if self._stderr else ""
        return f"the doctor's Ray driver (pid {proc.pid}) ended, {how}{said}"

    def _settle(self, call_id: int, data: bytes | None, error: str | None) -> None:
        with self._lock:
            future = self._calls.pop(call_id, None)
            asked = self._asked.pop(call_id, None)
            if asked is not None and data is not None:
                self._answered[asked] = time.monotonic()
        if future is not None and not future.done():
            future.set_result((data, error))

    def _fail(self, why: str) -> None:
        """Every call still waiting, and the connection if not made, end with `why`."""
        with self._lock:
            self._gone = self._gone or why
            pending, self._calls = list(self._calls.values()), {}
        if not self._ready.is_set():
            self._error = why
            self._ready.set()
        for future in pending:
            if not future.done():
                future.set_result((None, why))

    def ready(self, timeout: float) -> str | None:
        """None when connected, else why not."""
        if not self._ready.wait(timeout):
            return "connecting to Ray as a driver took too long"
        return self._error

    def submit(
        self,
        node: RemoteNode,
        spec: NodeSpec,
        opts: CollectOptions,
        budget_s: float,
        gpus: bool,
        until: float | None = None,
    ) -> cf.Future[Answer]:
        """Ask the node's probe for a sample, or (`gpus`) for its GPU readings until `until`
        (epoch seconds; default: `budget_s` from now): the future of its answer's bytes. The call
        goes to the driver at once (it makes it once connected); this never blocks."""
        future: cf.Future[Answer] = cf.Future()
        end = time.time() + budget_s if until is None else until
        with self._lock:
            gone = self._gone
            call_id = next(self._ids)
            if gone is None:
                self._calls[call_id] = future
                if not gpus:
                    self._asked[call_id] = (node.node_id, spec.sample)
        if gone is not None:
            future.set_result((None, gone))
            return future
        sent = node_options(opts)
        payload = pickle.dumps(
            ("gpus", spec, sent, budget_s, end) if gpus else ("sample", spec, sent, budget_s)
        )
        call = ("call", call_id, node.node_id, node.node_ip, spec.sample, payload)
        self._outbox.put(pickle.dumps(call))
        return future

    def window_left(self, node: RemoteNode, sample: int, window_s: float) -> float:
        """How much of the window after the node's `sample` is still to come: its next sample
        begins a window after that one began (NodeProbe), which was before its answer came here;
        the whole window where no answer came."""
        with self._lock:
            answered = self._answered.get((node.node_id, sample))
        if answered is None:
            return window_s
        return max(0.0, answered + window_s - time.monotonic())

    def fetch(
        self, handle: cf.Future[Answer], timeout: float
    ) -> tuple[Exported | None, str | None]:
        """A node's records, read within the bounds of the record format, or why not."""
        try:
            data, error = handle.result(timeout=max(0.0, timeout))
        except cf.TimeoutError:
            if not self._ready.is_set():
                return None, "connecting to Ray as a driver took too long"
            return None, "no answer in time"
        if data is None:
            return None, error or "no answer"
        return read_answer(data)

    def close_soon(self) -> None:
        """`close` in a thread of its own, once nothing more is asked of the nodes: the run's
        analysis goes on meanwhile; the interpreter waits for it (at most CLOSE_WAIT_S and a
        kill) before it exits, so no driver outlives the doctor."""
        threading.Thread(target=self.close, name="ray-close", daemon=False).start()

    def close(self) -> None:
        """Ask the driver to kill its probes and disconnect; killed if it has not within
        CLOSE_WAIT_S or by the run's deadline (or does not read its pipe: stopped, hung)."""
        proc = self._proc
        self._closed = True
        if proc is None:
            return
        self._outbox.put(pickle.dumps(("close",)))
        self._outbox.put(None)
        try:
            proc.wait(timeout=max(0.0, min(CLOSE_WAIT_S, self._end - time.monotonic())))
        except subprocess.TimeoutExpired:
            self._kill()
        self._fail("the run was over")
        if self._killer is not None:
            self._killer.cancel()  # (its thread ends now, not at the deadline: a watch's threads stay flat)

    def _kill(self) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            try:
                proc.kill()  # (a stopped process dies of SIGKILL too)
                proc.wait(timeout=5.0)
            except (OSError, subprocess.TimeoutExpired):
                pass

    @property
    def pid(self) -> int | None:
        """The driver process's pid (None: not started)."""
        return None if self._proc is None else self._proc.pid


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


@dataclass(frozen=True)
class Asked:
    """What the doctor asked a node for: its records are filed under that node, at that sample
    (None: the GPU readings over the window), and only those of these sources are kept."""

    node: RemoteNode
    sample: int | None
    sources: frozenset[str]

    @property
    def gpus(self) -> bool:
        """The GPU readings over the window (not a sample)."""
        return self.sample is None


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
    """A node request under way: what was asked, and the future of its answer."""

    asked: Asked
    future: cf.Future[Answer]

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
    """Ask each node's probe for a sample (or its GPU readings), without waiting: the calls go
    to the driver's process at once, which makes them as soon as it is connected (the caller
    samples its own node meanwhile). Returns the calls (what was asked, the future of its
    answer); gather_remote waits for them."""
    sources = GPU_SOURCES if gpus else SAMPLE_SOURCES

    def budget(spec: NodeSpec) -> float:
        return budget_s if budget_s is not None else deadline.clamp(call_budget(opts, spec.sample))

    return [
        Call(
            Asked(node, None if gpus else spec.sample, sources),
            tasks.submit(node, spec, opts, budget(spec), gpus, until),
        )
        for node, spec in nodes
    ]


def gather_remote(
    tasks: RayTasks,
    writer: BundleWriter,
    started: Started,
    sample: int | None,
    deadline: Deadline,
    wait_s: float,
    *,
    window_s: float = 0.0,
) -> list[RemoteNode]:
    """Wait (bounded) for started calls; add their evidence; returns the nodes whose sample
    failed. A failed call for the GPU readings costs that node's GPU readings only (its samples
    are the sample calls'): a GPU blind spot, not a node "not inspected". `window_s`: a call for
    a sample after the first waits `wait_s` plus what is still to come of the window after the
    node's sample before (`RayTasks.window_left`: a node whose last answer came late takes its
    next sample late), within the deadline."""
    failed: list[RemoteNode] = []

    now = time.monotonic()
    end = now + deadline.clamp(wait_s)
    last = now + deadline.remaining()

    def one(call: Call) -> None:
        node, sample = call.node, call.asked.sample
        until = end
        if window_s and sample:
            until = min(last, end + tasks.window_left(node, sample - 1, window_s))
        exported, error = tasks.fetch(call.future, max(0.05, until - time.monotonic()))
        if exported is None and call.asked.gpus:
            gpu_blind_spot(writer, node, error or "no answer")
        elif exported is None:
            node_blind_spot(writer, node, sample, error or "no answer")
            failed.append(node)
        else:
            add_exported(writer, exported, call.asked)

    if started:
        with cf.ThreadPoolExecutor(max_workers=min(32, len(started))) as pool:
            list(pool.map(one, started))
    return failed


# A node's two samples closer than this share of the window: its comparison is said to be shorter
SHORT_WINDOW_SHARE = 0.95


def short_window_spots(writer: BundleWriter, nodes: list[RemoteNode], window_s: float) -> int:
    """A blind spot for each node whose two samples began less than the window apart (the run's
    deadline left its probe no later second sample: NodeProbe), from its process scans' start
    times (both read on that node's clock); returns how many. Slow and hung are told apart over
    that shorter time there."""
    began = _scans_began(writer.records)
    short = 0
    for node in nodes:
        first, second = began.get((node.node_id, 0)), began.get((node.node_id, 1))
        if first is None or second is None or second - first >= window_s * SHORT_WINDOW_SHARE:
            continue
        gap = max(0.0, second - first)
        writer.add(
            ProbeRecord(
                PROCESSES,
                f"node {node.node_ip} window",
                Outcome.TIMED_OUT,
                f"node {node.node_ip} ({node.node_id[:12]}): its two samples began {gap:.1f} s "
                f"apart, not the {window_s:.1f} s window (the run's deadline left no later "
                f"second sample): slow and hung are told apart over {gap:.1f} s there",
                node_ip=node.node_ip,
                sample=1,
                started_at=time.time(),
                meta={"node_id": node.node_id, "gap_s": round(gap, 3), "window_s": window_s},
            )
        )
        short += 1
    return short


def _scans_began(records: tuple[ProbeRecord, ...]) -> dict[tuple[str, int], float]:
    """(node id, sample) -> when the node's process scan of that sample began (its clock)."""
    began: dict[tuple[str, int], float] = {}
    for rec in records:
        node_id = rec.meta.get("node_id")
        scan = rec.source == PROCESSES and rec.outcome is Outcome.OK and rec.started_at > 0
        if scan and isinstance(node_id, str) and rec.sample in (0, 1):
            key = (node_id, rec.sample)
            began[key] = min(began.get(key, rec.started_at), rec.started_at)
    return began


def node_blind_spot(writer: BundleWriter, node: RemoteNode, sample: int | None, why: str) -> None:
    """A node whose sample was not taken (or not read): the whole node at that sample."""
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


def gpu_blind_spot(writer: BundleWriter, node: RemoteNode, why: str) -> None:
    """A node whose GPU readings over the window did not come (its samples may have): a blind
    spot of that node's GPUs, filed as the NVML record the readings would have been."""
    writer.add(
        ProbeRecord(
            NVML,
            GPU_TARGET,
            Outcome.UNAVAILABLE,
            f"node {node.node_ip} ({node.node_id[:12]}): GPU readings not taken: {why}",
            node_ip=node.node_ip,
            started_at=time.time(),
            meta={"node_id": node.node_id},
        )
    )
