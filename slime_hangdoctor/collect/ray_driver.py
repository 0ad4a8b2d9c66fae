"""The doctor's Ray driver, in a process of its own (issue 43 item 1).

`python -m slime_hangdoctor.collect.ray_driver IN_FD OUT_FD SECONDS GCS` is started by
`remote.RayTasks` for each run that reaches another node (`attach`, `check`, `watch`, `collect`):
this process holds `ray.init`, creates one probe per node and asks it for its samples, and answers
the doctor over a pipe. A failed internal check of Ray's core worker, a lost raylet or GCS (which
end the driver's process with exit 1), or a connect that never returns ends or stalls this process
only: the doctor reads its end as a blind spot of the nodes it was asked about, and kills it at
the run's deadline. Each run gets a fresh one, so nothing of a GCS that died is reused.

The pipe (multiprocessing.connection's framing: a length, then the bytes):
- the doctor to here: pickles of ("call", id, node_id, node_ip, first_sample, payload) and
  ("close",); the payload (the doctor's pickle of the probe's arguments) goes to the node's
  probe unread (`probe_boot.BootProbe.asked`), so this process imports none of the package's
  types. (The doctor started this process and is its only writer; nothing from a node travels
  this way.)
- here to the doctor: msgpack maps {"ready": bool, "error": str|None} once, and per call
  {"id", "error", "size"} followed, when `size` > 0, by the node's answer: the raw bytes it
  stored in Ray, never deserialised here, checked against MAX_ANSWER_BYTES before they are
  copied. The doctor reads them within its own bounds (`remote.read_answer`): nothing here is
  unpickled from a node, and nothing is unpickled there from this process.
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
import pickle
import sys
import threading
import time
from pathlib import Path
from typing import Any

from slime_hangdoctor.collect.probe_boot import Module, Sent, sent_filename

NAMESPACE = "slime-hangdoctor"
# One node's answer, at most: a sample's stacks, process table and logs' heads are a few MiB.
MAX_ANSWER_BYTES = 256 * 1024 * 1024
# Ray's metadata of a raw (bytes) object: ray._private.ray_constants.OBJECT_METADATA_TYPE_RAW
RAW_METADATA = b"RAW"
# How long past its deadline this process may live (the doctor kills it at the deadline anyway)
GRACE_S = 2.0


@functools.cache
def package_sources() -> Sent:
    """The doctor's own package as the node's import system is served it (probe_boot.Sent):
    this Python's bytecode magic, and module name -> (source, whether it is a package, its code
    marshalled), read from the files the CLI runs."""
    import importlib.util

    import slime_hangdoctor

    root = Path(slime_hangdoctor.__file__).parent
    out: dict[str, Module] = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if package else parts)
        out[name] = (path.read_bytes(), package, module_code(name, path))
    return importlib.util.MAGIC_NUMBER, out


def module_code(name: str, path: Path) -> bytes | None:
    """A module's code object, marshalled, its file name the node's (`probe_boot.sent_filename`):
    from the bytecode cache where it is current (what this Python's own import reads and writes),
    else compiled from the file. None where it cannot be (the node compiles the source)."""
    import importlib.machinery
    import marshal
    import types

    try:
        code = importlib.machinery.SourceFileLoader(name, str(path)).get_code(name)
    except (OSError, SyntaxError, ValueError, ImportError):
        return None
    if code is None:
        return None
    filename = sent_filename(name)

    def refiled(c: types.CodeType) -> types.CodeType:
        consts = tuple(refiled(k) if isinstance(k, types.CodeType) else k for k in c.co_consts)
        return c.replace(co_filename=filename, co_consts=consts)

    return marshal.dumps(refiled(code))


class Driver:
    """A Ray driver in this process, and one probe per node (created once)."""

    def __init__(self, gcs_address: str) -> None:
        self.gcs_address = gcs_address
        self._probe_class: Any = None
        self._sources: Any = None  # the package's sources, in the object store (package_sources)
        self._probes: dict[tuple[str, str], Any] = {}
        # node -> the first sample the doctor asked of it (calls are answered on threads of their
        # own: a node's second-sample call may reach `probe` before its first's)
        self._first: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def connect(self) -> None:
        """ray.init and the probe's class; raises what Ray raised."""
        if not self.gcs_address:
            raise RuntimeError("the GCS address of the cluster is unknown (give host:6379)")
        # the package's sources and code are read while Ray connects (its waits for the GCS and
        # the raylet leave the interpreter free): off the connect's path
        read: list[Sent] = []
        reading = threading.Thread(
            target=lambda: read.append(package_sources()), name="package-sources", daemon=True
        )
        reading.start()
        import ray

        from slime_hangdoctor.collect import probe_boot

        cloudpickle: Any = importlib.import_module("ray.cloudpickle")  # untyped
        ray.init(
            address=self.gcs_address,
            namespace=NAMESPACE,
            logging_level=logging.ERROR,
            log_to_driver=False,
            configure_logging=False,
        )
        cloudpickle.register_pickle_by_value(probe_boot)
        reading.join()
        self._sources = ray.put(read[0] if read else package_sources())  # (else: raises here)
        actor: Any = ray.remote  # an actor class (the stubs of ray.remote type functions only)
        self._probe_class = actor(
            num_cpus=0, max_concurrency=4, max_restarts=0, max_task_retries=0
        )(probe_boot.BootProbe)

    def received(self, call: tuple[Any, ...]) -> None:
        """Note a call as it arrives (in the doctor's order): its node's first sample asked."""
        _, _, node_id, node_ip, first_sample, _ = call
        with self._lock:
            self._first.setdefault((node_id, node_ip), int(first_sample))

    def probe(self, node_id: str, node_ip: str, first_sample: int = 0) -> Any:
        """The node's probe, created (pinned to it) on first use, for the first sample the doctor
        asked of the node (`received`; else `first_sample`): whichever call's thread comes first,
        the probe then takes the samples in their order."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        with self._lock:
            handle = self._probes.get((node_id, node_ip))
            if handle is None:
                strategy = NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)
                first = self._first.get((node_id, node_ip), first_sample)
                handle = self._probe_class.options(scheduling_strategy=strategy).remote(
                    first, self._sources
                )
                self._probes[(node_id, node_ip)] = handle
            return handle

    def submit(self, call: tuple[Any, ...]) -> Any:
        """Ask a node's probe for what the doctor's call asks (its payload: the doctor's pickle of
        a sample's or the GPU readings' arguments, passed on unread): the call's object ref."""
        _, _, node_id, node_ip, first_sample, payload = call
        return self.probe(node_id, node_ip, first_sample).asked.remote(payload)

    def fetch(self, ref: Any, timeout: float) -> tuple[bytes | None, str | None]:
        """A node's answer as the raw bytes it stored (never unpickled), or why not."""
        data, error, running = raw_answer(ref, timeout)
        if running:
            # only a task still running is cancelled: cancelling one whose answer arrived races
            # Ray's own completion of it, which ends the process (a failed check in Ray 2.60's
            # TaskManager::CompletePendingTask, "Tried to complete task that was not pending")
            _cancel(ref)
        return data, error

    def close(self) -> None:
        if self._probe_class is None:
            return
        try:
            import ray

            for handle in list(self._probes.values()):
                try:
                    ray.kill(handle, no_restart=True)
                except Exception:  # noqa: BLE001 - the driver's end kills it anyway
                    pass
            ray.shutdown()
        except Exception:  # noqa: BLE001
            pass


def raw_answer(ref: Any, timeout: float) -> tuple[bytes | None, str | None, bool]:
    """The bytes of a raw object (a node's answer), read without deserialising it; else why not;
    and whether its task may still run (no answer in time: the one case to cancel it).

    `ray.get` deserialises by the object's own metadata, which its writer chose: a `PYTHON`
    object is unpickled. The core worker's `get_objects` returns the serialised object (data,
    metadata) as stored; only `RAW` (what Ray stores for a `bytes` return value) is read, and
    only after its size is checked (Ray's buffer is copied once, within MAX_ANSWER_BYTES)."""
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
    if kind != RAW_METADATA:
        return None, _not_raw(kind, data), False
    size = 0 if data is None else len(data)
    if size > MAX_ANSWER_BYTES:
        return None, f"its answer of {size} bytes is over {MAX_ANSWER_BYTES} bytes: not read", False
    return (b"" if data is None else data.to_pybytes()), None, False


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


# --------------------------------------------------------------------------- the child's loop


class _Pipe:
    """This process's ends of the doctor's two pipes; replies are sent whole under one lock."""

    def __init__(self, in_fd: int, out_fd: int) -> None:
        from multiprocessing.connection import Connection

        self.inbox = Connection(in_fd, writable=False)
        self.outbox = Connection(out_fd, readable=False)
        self._lock = threading.Lock()

    def reply(self, head: dict[str, Any], data: bytes | None = None) -> None:
        import msgpack

        with self._lock:
            try:
                self.outbox.send_bytes(msgpack.packb(head, use_bin_type=True))
                if data:
                    self.outbox.send_bytes(data)
            except OSError:  # the doctor is gone: this process ends with its inbox
                pass


class _Connection:
    """The driver's connection, made in a thread of its own: `done` once it is made or failed."""

    def __init__(self, driver: Driver, pipe: _Pipe) -> None:
        self.driver, self.pipe = driver, pipe
        self.done = threading.Event()
        self.error: str | None = None
        threading.Thread(target=self._connect, name="ray-connect", daemon=True).start()

    def _connect(self) -> None:
        try:
            self.driver.connect()
        except Exception as exc:  # noqa: BLE001 - any failure is the doctor's blind spot
            self.error = f"could not connect to Ray as a driver: {type(exc).__name__}: {exc}"[:400]
        self.pipe.reply({"ready": self.error is None, "error": self.error})
        self.done.set()


def _answer(pipe: _Pipe, link: _Connection, call: tuple[Any, ...], end: float) -> None:
    """One call: submitted once the driver is connected, its answer sent when it comes (or why
    not, at the end of this process's time)."""
    call_id = int(call[1])
    if not link.done.wait(max(0.0, end - time.monotonic())):
        pipe.reply(
            {"id": call_id, "error": "connecting to Ray as a driver took too long", "size": 0}
        )
        return
    if link.error is not None:
        pipe.reply({"id": call_id, "error": link.error, "size": 0})
        return
    driver = link.driver
    try:
        ref = driver.submit(call)
    except Exception as exc:  # noqa: BLE001 - the call could not be made: why is the text
        pipe.reply({"id": call_id, "error": f"could not ask its probe: {exc}"[:300], "size": 0})
        return
    data, error = driver.fetch(ref, max(0.1, end - time.monotonic()))
    size = 0 if data is None else len(data)
    pipe.reply({"id": call_id, "error": error, "size": size}, data)


def serve(pipe: _Pipe, gcs_address: str, seconds: float) -> None:
    """Connect, then answer the doctor's calls until it says close, its pipe ends, or the time
    given is over (then this process ends, whatever a call still waits for)."""
    end = time.monotonic() + seconds
    threading.Timer(seconds + GRACE_S, os._exit, args=(0,)).start()
    link = _Connection(Driver(gcs_address), pipe)
    while True:
        try:
            call = pickle.loads(pipe.inbox.recv_bytes())  # noqa: S301 - from the doctor that started us
        except (EOFError, OSError):
            break
        if call[0] == "close":
            break
        link.driver.received(call)
        threading.Thread(target=_answer, args=(pipe, link, call, end), daemon=True).start()
    link.driver.close()


def main(argv: list[str]) -> None:
    in_fd, out_fd, seconds, gcs_address = int(argv[1]), int(argv[2]), float(argv[3]), argv[4]
    serve(_Pipe(in_fd, out_fd), gcs_address, seconds)
    sys.stdout.flush()
    os._exit(0)  # Ray's atexit hooks ran in shutdown; no thread left may hold the exit


if __name__ == "__main__":
    main(sys.argv)
