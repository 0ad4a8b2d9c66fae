"""Tails of the job's logs through Ray's log API (`GET /api/v0/logs/file`), within a byte budget.

What is read: the driver's log of each RUNNING job submitted through the Job API (`submission_id`:
Ray's `job-driver-<id>.log`, the driver's stdout and stderr, with the actors' lines Ray forwards to
it) and the `err` and `out` files of each ALIVE slime actor (`actor_id`: Ray resolves the worker's
`worker-*.err` / `.out` on its node; slime's `logging` lines, SGLang's logs and tqdm go to `err`,
`print` to `out`). Each GET asks for the last `lines` lines and is capped at a per-file share of the
byte budget; a tail that does not fit is asked again with fewer lines, so the newest lines are kept.
Read-only: the log API only reads files under the nodes' Ray log folders. Never raises.
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from slime_hangdoctor.bundle import BundleWriter, ProbeRecord
from slime_hangdoctor.collect.dashboard import DashboardClient, HttpResult, classify
from slime_hangdoctor.collect.node_probe import WindowContext
from slime_hangdoctor.outcome import Outcome
from slime_hangdoctor.parsers.logs import RAY_LOGS
from slime_hangdoctor.parsers.ray_state import ACTOR_ALIVE, JOB_RUNNING, RAY_STATE, RayActor, RayJob
from slime_hangdoctor.topology import CLASS_ROLES
from slime_hangdoctor.verdict import Role

LOG_ENDPOINT = "/api/v0/logs/file"
BUDGET_BYTES = 4 * 1024 * 1024  # all tails of one run together
MAX_FILE_BYTES = 256 * 1024  # one tail
LINES = 400  # lines asked per tail
MAX_ACTORS = 24  # actors whose logs are read (two files each); the rest is a named blind spot
# Who is read first when the job has more actors than MAX_ACTORS, by role: the one RolloutManager,
# then the train ranks (global rank 0 alone prints slime's Timer lines), then the engines.
_READ_ORDER = (Role.ROLLOUT_MANAGER, Role.TRAIN_RANK, Role.SGLANG_ENGINE)


def _read_priority(class_name: str) -> int:
    """Where a slime actor class comes in `_READ_ORDER` (lower is read first; a role not in it
    last)."""
    role = CLASS_ROLES.get(class_name)
    return _READ_ORDER.index(role) if role in _READ_ORDER else len(_READ_ORDER)


@dataclass(frozen=True)
class LogTarget:
    """One log file to tail: a job's driver log or one stream of an actor."""

    kind: str  # driver | actor
    target: str  # artefact name
    params: tuple[tuple[str, str], ...]
    node_ip: str | None = None
    meta: tuple[tuple[str, Any], ...] = ()


def log_targets(
    jobs: Sequence[RayJob], actors: Sequence[RayActor], max_actors: int = MAX_ACTORS
) -> tuple[list[LogTarget], int]:
    """The files to tail and how many slime actors were left out for the budget."""
    out: list[LogTarget] = []
    running = [j for j in jobs if j.status == JOB_RUNNING]
    for j in running:
        if not j.submission_id:
            continue
        # By file name on the driver's node where the Job API gave it: Ray 2.60 resolves
        # `submission_id=` with the driver node of the *last* job it lists (a loop-variable slip in
        # log_manager._resolve_job_filename), which answers 500 when that job has none.
        params = (
            (("node_ip", j.driver_node_ip), ("filename", f"job-driver-{j.submission_id}.log"))
            if j.driver_node_ip
            else (("submission_id", j.submission_id),)
        )
        out.append(
            LogTarget(
                "driver",
                f"driver-{j.submission_id}",
                params,
                j.driver_node_ip,
                (("submission_id", j.submission_id), ("job_id", j.job_id), ("pid", j.driver_pid)),
            )
        )
    job_ids = {j.job_id for j in running if j.job_id}
    slime = [
        a
        for a in actors
        if a.class_name in CLASS_ROLES
        and a.state == ACTOR_ALIVE
        and (not job_ids or a.job_id in job_ids or a.job_id is None)
    ]
    slime.sort(key=lambda a: (_read_priority(a.class_name), a.class_name, a.pid or 0, a.actor_id))
    for a in slime[:max_actors]:
        for suffix in ("err", "out"):
            out.append(
                LogTarget(
                    "actor",
                    f"{a.class_name}-{a.actor_id[:12]}-{suffix}",
                    (("actor_id", a.actor_id), ("suffix", suffix)),
                    a.node_ip,
                    (
                        ("actor_id", a.actor_id),
                        ("class_name", a.class_name),
                        ("pid", a.pid),
                        ("suffix", suffix),
                    ),
                )
            )
    return out, max(0, len(slime) - max_actors)


def fetch_logs(
    writer: BundleWriter,
    client: DashboardClient,
    jobs: Sequence[RayJob],
    actors: Sequence[RayActor],
    *,
    timeout: float,
    budget_bytes: int = BUDGET_BYTES,
    lines: int = LINES,
    max_actors: int = MAX_ACTORS,
) -> list[ProbeRecord]:
    """Tail every target at once (8 in flight), each GET under `timeout`; never raises."""
    targets, left_out = log_targets(jobs, actors, max_actors)
    records: list[ProbeRecord] = []
    if left_out:
        records.append(
            writer.add(
                ProbeRecord(
                    RAY_LOGS,
                    "actors-left-out",
                    Outcome.UNAVAILABLE,
                    f"{left_out} slime actor(s) beyond the first {max_actors} were not read "
                    "(log byte budget)",
                    started_at=time.time(),
                )
            )
        )
    if not targets:
        return records
    per_file = max(4096, min(MAX_FILE_BYTES, budget_bytes // len(targets)))
    limit = max(0.05, timeout)
    from slime_hangdoctor.collect.daemon_calls import gather

    def failed(t: LogTarget, fut: cf.Future[ProbeRecord]) -> ProbeRecord:
        late = not fut.done() or fut.cancelled()  # a call not started by the deadline is late
        record = ProbeRecord(
            RAY_LOGS,
            t.target,
            Outcome.TIMED_OUT if late else Outcome.FAILED,
            "no answer before the log fetch's deadline"
            if late
            else f"log fetch failed: {fut.exception()!r}"[:300],
            node_ip=t.node_ip,
            started_at=time.time(),
            meta={"kind": t.kind, **dict(t.meta)},
        )
        return writer.add(record)

    records.extend(
        gather(
            lambda t: _tail_one(writer, client, t, limit, per_file, lines),
            targets,
            workers=min(8, len(targets)),
            name="ray-logs",
            wait_s=2 * limit + 1.0,
            unfinished=failed,
        )
    )
    return records


def _tail_one(
    writer: BundleWriter,
    client: DashboardClient,
    t: LogTarget,
    timeout: float,
    max_bytes: int,
    lines: int,
) -> ProbeRecord:
    started = time.time()
    t0 = time.monotonic()
    asked = lines
    res = _get(client, t, asked, timeout, max_bytes)
    # A tail larger than its share: ask again for fewer lines (the newest are what matter), once.
    if res.status == 200 and res.truncated and asked > 8:
        asked = max(8, asked // 8)
        res = _get(client, t, asked, max(0.05, timeout - (time.monotonic() - t0)), max_bytes)
    outcome, reason = classify(res)
    if res.status == 200 and res.truncated:
        outcome, reason = Outcome.OK, None  # the head of the tail is kept; meta says it was cut
    meta: dict[str, Any] = {
        "kind": t.kind,
        **dict(t.meta),
        "endpoint": LOG_ENDPOINT,
        "lines": asked,
        "max_bytes": max_bytes,
        "status": res.status,
        "truncated": res.truncated,
        "elapsed_s": round(res.elapsed_s, 4),
        # Log lines carry the process's local time without a zone: the loader reads them with
        # this offset (the collector's; slime nodes are expected to share it).
        "utc_offset_s": time.localtime(started).tm_gmtoff,
    }
    if res.error:
        meta["error"] = res.error
    record = ProbeRecord(
        RAY_LOGS,
        t.target,
        outcome,
        reason,
        node_ip=t.node_ip,
        started_at=started,
        elapsed_s=time.monotonic() - t0,
        meta=meta,
    )
    data = res.body if res.status == 200 else None
    return writer.add(record, data, suffix=".log")


def _get(
    client: DashboardClient, t: LogTarget, lines: int, timeout: float, max_bytes: int
) -> HttpResult:
    params = (*t.params, ("lines", str(lines)), ("timeout", str(max(1, int(timeout)))))
    return client.get(LOG_ENDPOINT, params, timeout=timeout, max_body=max_bytes)


def WINDOW_PROBE(ctx: WindowContext) -> threading.Thread | None:  # noqa: N802 - the spec's entry point
    """Tail the driver's and the slime actors' logs (Ray log API) while the window passes (the
    dashboard and Ray's agents are then idle, so the tails do not slow the second sample's dumps
    and probes); returns the thread, which the run joins before the bundle is finished."""
    if not ctx.opts.logs or ctx.deadline.expired:
        return None
    from slime_hangdoctor.collect.node import partial_snapshot

    state = partial_snapshot(ctx.writer).joined(RAY_STATE)
    if not state.jobs and not state.actors:
        return None
    ctx.say("reading the job's logs")
    thread = threading.Thread(
        target=fetch_logs,
        args=(ctx.writer, ctx.client, state.jobs, state.actors),
        kwargs={"timeout": ctx.deadline.clamp(ctx.opts.probe_timeout_s)},
        name="ray-logs",
        daemon=True,
    )
    thread.start()
    return thread
