"""The head of a slime actor's Ray worker log, read on its node (the `actor_log_head` artefact).

Why the head: slime's RolloutManager logs `Router launched at HOST:PORT` once, when it forked the
router (a router that was killed listens nowhere either); slime's SGLangEngine logs `Launch HttpServerEngineAdapter at: HOST:PORT` and SGLang's
uvicorn `Uvicorn running on http://HOST:PORT` once, at start-up, into the actor's worker log (the
HTTP server is a multiprocessing child of the actor and inherits its stdout and stderr). An engine
whose server is gone listens nowhere, so its URL is found by no socket; these lines still name it.
In a long job the log grows with SGLang's request lines, so a tail no longer has them.

Why here and not through Ray's log API: Ray 2.60's `GET /api/v0/logs/file` takes `lines` (a tail
of that many lines; -1 streams the whole file from its start) and no byte range: the agent's
`start_offset`/`end_offset` are set only for task logs (`log_manager.resolve_filename`), never from
the query. A head through the API would stream the whole file until the doctor hangs up. So the
node-local sample reads it from the file itself.

Where the file is: Ray points the worker's fd 1 and fd 2 at `<session>/logs/worker-<worker id>-<job
id>-<pid>.out` and `.err` (checked on Ray 2.60). The doctor opens `/proc/<pid>/fd/2` and `/fd/1` only
when the link names such a file of that very pid (Ray's `WORKER_LOG_PATTERN`) and it is a regular
file: a pipe or a terminal is never read (reading one would take bytes from its reader).

Read-only, no signal, no ptrace: readlink and a read of at most MAX_HEAD_BYTES per stream, in
chunks, under the deadline. The same permission as the process's environment (its user or root): a
refusal is a `denied` record. Never raises.
"""

from __future__ import annotations

import concurrent.futures as cf
import errno
import os
import re
import stat
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from slime_hangdoctor.bundle import BundleWriter, ProbeRecord
from slime_hangdoctor.collect.node_probe import NodeContext
from slime_hangdoctor.outcome import Outcome
from slime_hangdoctor.parsers.log_heads import ACTOR_LOG_HEAD
from slime_hangdoctor.redact import utf8_prefix
from slime_hangdoctor.topology import MemberKind
from slime_hangdoctor.verdict import Role

MAX_HEAD_BYTES = 64 * 1024  # per stream
CHUNK = 16 * 1024
# stream -> the fd Ray points at it; err first (slime's `logging` and uvicorn write there)
STREAMS: tuple[tuple[str, int], ...] = (("err", 2), ("out", 1))
# Ray's worker log names (ray/dashboard/modules/log/log_manager.py WORKER_LOG_PATTERN): the job id
# is left out when the worker has none (ray_logging.get_worker_log_file_name).
WORKER_LOG = re.compile(r"worker-[0-9a-f]+-(?:[0-9a-f]+-)?(?P<pid>\d+)\.(?P<stream>out|err)")


@dataclass(frozen=True)
class Head:
    """What reading one stream's head gave: bytes, or why not."""

    outcome: Outcome
    reason: str | None = None
    data: bytes | None = None
    file: str | None = None  # the log's file name (no folder)
    size: int | None = None  # the file's size when read


def read_head(
    pid: int,
    stream: str,
    fd: int,
    deadline: float,
    procfs: str = "/proc",
    max_bytes: int = MAX_HEAD_BYTES,
) -> Head:
    """The first `max_bytes` of the Ray worker log that `pid`'s fd `fd` points at; never raises."""
    link = f"{procfs}/{pid}/fd/{fd}"
    try:
        target = os.readlink(link)
    except PermissionError:
        return Head(Outcome.DENIED, f"fd {fd} of pid {pid}: permission denied (another user's)")
    except FileNotFoundError:
        gone = not os.path.exists(f"{procfs}/{pid}")
        why = f"pid {pid} is gone" if gone else f"pid {pid} has no fd {fd}"
        return Head(Outcome.UNAVAILABLE, why)
    except OSError as exc:
        return Head(Outcome.FAILED, f"readlink {link}: {exc.strerror or exc}")
    name = os.path.basename(target)
    match = WORKER_LOG.fullmatch(name)
    if match is None or int(match["pid"]) != pid or match["stream"] != stream:
        return Head(
            Outcome.UNAVAILABLE,
            f"fd {fd} of pid {pid} is not its Ray worker {stream} log ({name[:60]!r}): not read",
        )
    try:
        handle = os.open(link, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except PermissionError:
        return Head(Outcome.DENIED, f"{name}: permission denied", file=name)
    except OSError as exc:
        outcome = Outcome.UNAVAILABLE if exc.errno == errno.ENOENT else Outcome.FAILED
        return Head(outcome, f"{name}: {exc.strerror or exc}", file=name)
    try:
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode):
            return Head(Outcome.UNAVAILABLE, f"{name} is not a regular file: not read", file=name)
        chunks: list[bytes] = []
        total = 0
        while total < max_bytes:
            if time.monotonic() > deadline:
                return Head(Outcome.TIMED_OUT, f"{name}: deadline reached after {total} bytes")
            chunk = os.read(handle, min(CHUNK, max_bytes - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        data = b"".join(chunks)
        if total >= max_bytes:  # the cap cut the log: on a character boundary (tqdm's bars)
            data = utf8_prefix(data, max_bytes)
        return Head(Outcome.OK, None, data, name, info.st_size)
    except OSError as exc:
        return Head(Outcome.FAILED, f"{name}: {exc.strerror or exc}", file=name)
    finally:
        os.close(handle)


def record_log_heads(
    writer: BundleWriter,
    actors: Iterable[tuple[int, str]],
    *,
    node_ip: str | None,
    sample: int | None,
    timeout: float,
    procfs: str = "/proc",
    max_bytes: int = MAX_HEAD_BYTES,
) -> list[ProbeRecord]:
    """Read and store the err and out heads of each `(pid, class name)`; one record per stream."""
    deadline = time.monotonic() + max(0.05, timeout)
    out: list[ProbeRecord] = []
    for pid, class_name in actors:
        for stream, fd in STREAMS:
            started = time.time()
            t0 = time.monotonic()
            try:
                head = read_head(pid, stream, fd, deadline, procfs, max_bytes)
            except Exception as exc:  # noqa: BLE001 - a collector never raises past itself
                head = Head(Outcome.FAILED, f"log head read failed: {exc!r}"[:300])
            meta: dict[str, Any] = {
                "pid": pid,
                "class_name": class_name,
                "stream": stream,
                "max_bytes": max_bytes,
            }
            if head.file is not None:
                meta["file"] = head.file
            if head.data is not None:
                meta["bytes"] = len(head.data)
                meta["truncated"] = head.size is not None and head.size > len(head.data)
            record = ProbeRecord(
                ACTOR_LOG_HEAD,
                f"{class_name}-{pid}-{stream}",
                head.outcome,
                head.reason,
                node_ip=node_ip,
                sample=sample,
                started_at=started,
                elapsed_s=time.monotonic() - t0,
                meta=meta,
            )
            out.append(writer.add(record, head.data, suffix=".log"))
    return out


def unserved_engine_actors(ctx: NodeContext) -> list[tuple[int, str]]:
    """SGLangEngine actors of this node whose URL no listening child gives (a server that is gone,
    or not up yet), and whose log heads this run has not read yet."""
    done = ctx.spec.done(ACTOR_LOG_HEAD)
    return [
        (m.pid, m.class_name or "SGLangEngine")
        for m in ctx.members()
        if m.role is Role.SGLANG_ENGINE
        and m.kind is MemberKind.ACTOR
        and m.engine_url is None
        and m.pid not in done
    ]


def routerless_rollout_managers(ctx: NodeContext) -> list[tuple[int, str]]:
    """RolloutManager actors of this node with no listening router below them (slime forks
    sgl-router in the RolloutManager's constructor: a router that was killed listens nowhere, and
    `Router launched at HOST:PORT` in the head of the RolloutManager's log still names it), and
    whose log heads this run has not read yet."""
    done = ctx.spec.done(ACTOR_LOG_HEAD)
    members = ctx.members()
    routers = [m for m in members if m.role is Role.ROUTER and m.engine_url]
    return [
        (m.pid, m.class_name or "RolloutManager")
        for m in members
        if m.role is Role.ROLLOUT_MANAGER
        and m.kind is MemberKind.ACTOR
        and not any(
            r.parent_pid == m.pid or (r.actor_id is not None and r.actor_id == m.actor_id)
            for r in routers
        )
        and m.pid not in done
    ]


def NODE_PROBE(ctx: NodeContext) -> list[cf.Future[Any]]:  # noqa: N802 - the spec's entry point
    """The heads of the worker logs of this node's engine actors with no serving child and of its
    RolloutManagers with no listening router (parsers.log_heads.SPEC): each read once a run."""
    actors = unserved_engine_actors(ctx) + routerless_rollout_managers(ctx)
    if not actors:
        return []
    return [
        ctx.pool.submit(
            record_log_heads,
            ctx.writer,
            actors,
            node_ip=ctx.spec.node_ip,
            sample=ctx.spec.sample,
            timeout=ctx.timeout(),
        )
    ]
