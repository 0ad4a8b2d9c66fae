"""Read-only HTTP probes of SGLang engines and slime's router (reference/sglang.md §1, §2, §6, §8).

Every request is a GET with its own client timeout and a body cap, and ends as one `ProbeRecord`
(source `sglang` or `router`) whose raw body goes verbatim into the bundle. Nothing here raises.

Default engine probe (all read-only). First, concurrently, what the HTTP process answers by itself:

- `/model_info` (fallback `/get_model_info` on 404): tokenizer process only, the HTTP liveness probe.
- `/v1/loads` (fallback `/get_load`): the load snapshot (frozen values when the scheduler is stuck).
- `/metrics`: Prometheus counters, whose deltas across the two samples show progress, and the HTTP
  middleware's per-endpoint request counts (pause/continue calls, calls in flight).
- `/ready` and `/ping` (tokenizer-side flag checks, no scheduler, no side effect): on >=0.5.20
  `/ready` is 503 while paused and `/ping` stays 200; on 0.5.15 `/ready` is 404 and `/ping` always
  200. Their status is the answer: 404 and 503 are recorded as ok answers, not as failures.

Then `/server_info` (fallback `/get_server_info`), a scheduler round trip: slime's patch answers
`internal_states: []` after 2 s when the scheduler is stuck, stock SGLang hangs (so: timed_out). On
the versions whose queueing communicator never recovers from a cancelled call (before 0.5.23, the
version `/v1/loads` reports; an unknown version counts as one of them), one `/server_info` that
times out poisons the endpoint for every later caller (0.5.15.post1 communicator.py:38-58), so it is
not sent when the first reads already show the scheduler busy or silent (`server_info_risk`): a
request in flight in `/v1/loads`, or at a scheduler-bound endpoint in `sglang:http_requests_active`,
or no answer from the HTTP process at all; and not at a later sample of the same run either
(`server_info_held`): a scheduler seen busy at the first sample may show nothing at the second only
because slime's own caller sits between two attempts (its warm-up loop), and a stuck one would hold
the call 2 s and be poisoned. The record then says "not sent" and why.

`/health` is NOT called by default. Since SGLang 0.4.10 `/health` is the same handler as
`/health_generate` (unless `SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=false`): on an idle scheduler it
runs a real 1-token generation, which on a colocated engine whose memory is released (>=0.5.10) can
fault the GPU and kill the engine; while paused or stuck it marks the server UnHealthy and logs an
ERROR after 20 s. What it could tell us is already given, side-effect free, by `/model_info` (HTTP
process alive), `/server_info` (scheduler answers) and `/metrics` (tokens move). It is opt-in:
`health=True` calls `/health` with a short timeout (min(timeout, 3 s)); `health_generate=True`
calls `/health_generate` with the full timeout (pass >= 25 s for a conclusive 503, which SGLang
gives only after 20 s).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from slime_hangdoctor.bundle import BundleWriter, ProbeRecord, safe_name
from slime_hangdoctor.errors import ParseError
from slime_hangdoctor.outcome import Outcome
from slime_hangdoctor.parsers import sglang as parsers
from slime_hangdoctor.parsers.sglang import ROUTER, SGLANG, SglangMetrics

# An answer past this size is not an SGLang answer (a /metrics page is ~10-500 KB): it is not kept,
# so a huge or endless body costs neither memory nor redaction and parse time (the run's bound).
BODY_CAP = 4 * 2**20
HEALTH_TIMEOUT_CAP_S = 3.0
JOIN_GRACE_S = 0.3  # how long past the budget we wait for a thread to hand its result over

Check = Callable[[bytes], object]


@dataclass(frozen=True)
class Endpoint:
    """One thing to ask: a path, and older names tried in order when the newer one answers 404."""

    paths: tuple[str, ...]
    check: Check | None  # a pure parser that must accept a 2xx body, or None
    suffix: str = ".json"
    timeout_cap_s: float | None = None
    status_answers: tuple[int, ...] = ()  # non-2xx statuses that are the answer, not a failure


# What to ask, and the parser that must accept a 2xx answer: the source's table, beside its parser.
ENGINE_ENDPOINTS: tuple[Endpoint, ...] = tuple(
    Endpoint(e.paths, e.parse, e.suffix, status_answers=e.status_answers)
    for e in parsers.ENGINE_ENDPOINTS
)
SERVER_INFO = next(e for e in ENGINE_ENDPOINTS if e.paths[0] == "/server_info")
HEALTH = Endpoint(("/health",), None, ".txt", HEALTH_TIMEOUT_CAP_S)
HEALTH_GENERATE = Endpoint(("/health_generate",), None, ".txt")
ROUTER_ENDPOINTS: tuple[Endpoint, ...] = tuple(
    Endpoint(e.paths, e.parse, e.suffix) for e in parsers.ROUTER_ENDPOINTS
)
ROUTER_METRICS_ENDPOINTS: tuple[Endpoint, ...] = tuple(
    Endpoint(e.paths, e.parse, e.suffix) for e in parsers.ROUTER_METRICS_ENDPOINTS
)


# --------------------------------------------------------------------------- one request


@dataclass
class Answer:
    """What one GET produced (filled by a worker thread, turned into a record by the caller)."""

    path: str
    started_at: float
    elapsed_s: float = 0.0
    status: int | None = None
    body: bytes | None = None
    content_type: str | None = None
    truncated: bool = False
    error: str | None = None
    outcome: Outcome = Outcome.FAILED
    reason: str | None = None
    fallback: str | None = None
    not_sent: bool = False  # deliberately not asked (see server_info_risk)
    hold_back: str | None = None  # why later samples must not ask again (see server_info_silent)


def _classify(exc: BaseException, budget: float) -> tuple[Outcome, str]:
    from slime_hangdoctor.collect.http import Failure, classify

    kind, text = classify(exc)
    if kind is Failure.REFUSED:
        return Outcome.UNAVAILABLE, text
    if kind is Failure.TIMEOUT:
        return Outcome.TIMED_OUT, f"timed out after {budget:.1f}s"
    if kind in (Failure.UNREACHABLE, Failure.UNKNOWN_HOST):
        return Outcome.UNAVAILABLE, text
    return Outcome.FAILED, text


def http_get(
    url: str,
    path: str,
    *,
    timeout: float,
    api_key: str | None,
    deadline: float,
    status_answers: tuple[int, ...] = (),
) -> Answer:
    """One capped, timed GET. Never raises."""
    from slime_hangdoctor.collect.http import BodyDeadline, get

    answer = Answer(path=path, started_at=time.time())
    tic = time.monotonic()
    headers = {"Accept": "*/*", "User-Agent": "slime-hangdoctor"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    try:
        got = get(url + path, headers, timeout=timeout, deadline=deadline, max_body=BODY_CAP)
        answer.status = got.status
        answer.content_type = got.content_type
        answer.body, answer.truncated = got.body, got.truncated
        _judge_status(answer, status_answers)
    except BodyDeadline as exc:
        answer.body = exc.partial
        answer.outcome, answer.reason = Outcome.TIMED_OUT, f"body incomplete after {timeout:.1f}s"
        answer.error = answer.reason
    except Exception as exc:
        answer.outcome, answer.reason = _classify(exc, timeout)
        answer.error = answer.reason
    answer.elapsed_s = round(time.monotonic() - tic, 4)
    return answer


def _judge_status(answer: Answer, status_answers: tuple[int, ...] = ()) -> None:
    status = answer.status or 0
    if answer.truncated:
        answer.outcome = Outcome.FAILED
        answer.reason = (
            f"HTTP {status} with an answer larger than {BODY_CAP // 2**20} MiB: not kept "
            "(no SGLang answer is this big)"
        )
        answer.body = None
    elif 200 <= status < 300 or status in status_answers:
        answer.outcome = Outcome.OK
    elif status in (401, 403):
        answer.outcome = Outcome.DENIED
        answer.reason = f"HTTP {status}: the server wants an API key (pass --api-key)"
    else:
        answer.outcome = Outcome.FAILED
        answer.reason = f"HTTP {status}"
    if answer.outcome is not Outcome.OK:
        answer.error = answer.reason


def _check_body(answer: Answer, check: Check | None) -> None:
    if check is None or answer.outcome is not Outcome.OK or answer.truncated:
        return
    try:
        check(answer.body or b"")
    except ParseError as exc:
        answer.outcome = Outcome.FAILED
        answer.reason = f"answer not understood: {exc}"
    except Exception as exc:  # a parser bug must not escape a collector
        answer.outcome = Outcome.FAILED
        answer.reason = f"answer not understood ({type(exc).__name__}: {exc})"


# --------------------------------------------------------------------------- one endpoint (thread)


@dataclass
class _Job:
    endpoint: Endpoint
    answers: list[Answer] = field(default_factory=list)
    current: tuple[str, float] | None = None  # path and wall start of the request in flight
    abandoned: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _run_job(job: _Job, url: str, api_key: str | None, timeout: float, deadline: float) -> None:
    paths = job.endpoint.paths
    for i, path in enumerate(paths):
        remaining = deadline - time.monotonic()
        if remaining <= 0.05:
            reason = "not sent: no time left of the probe budget"
            with job.lock:
                if not job.abandoned.is_set():
                    job.answers.append(
                        Answer(path, time.time(), outcome=Outcome.TIMED_OUT, reason=reason)
                    )
            return
        budget = min(remaining, job.endpoint.timeout_cap_s or timeout)
        with job.lock:
            if job.abandoned.is_set():
                return
            job.current = (path, time.time())
        answer = http_get(
            url,
            path,
            timeout=budget,
            api_key=api_key,
            deadline=time.monotonic() + budget,
            status_answers=job.endpoint.status_answers,
        )
        more = i + 1 < len(paths) and answer.status == 404
        if more:
            answer.fallback = paths[i + 1]
            answer.reason = f"HTTP 404; trying {paths[i + 1]}"
        else:
            _check_body(answer, job.endpoint.check)
        with job.lock:
            job.current = None
            if job.abandoned.is_set():
                return
            job.answers.append(answer)
        if not more:
            return


def _collect_jobs(
    endpoints: tuple[Endpoint, ...], url: str, api_key: str | None, timeout: float
) -> list[_Job]:
    """Run every endpoint in its own thread; at the budget, take what is there, mark the rest."""
    timeout = max(float(timeout), 0.1)
    deadline = time.monotonic() + timeout
    jobs = [_Job(e) for e in endpoints]
    threads = [
        threading.Thread(
            target=_run_job,
            args=(job, url, api_key, timeout, deadline),
            name=f"hangdoctor-http {job.endpoint.paths[0]}",
            daemon=True,
        )
        for job in jobs
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(deadline + JOIN_GRACE_S - time.monotonic(), 0.0))
    for job, t in zip(jobs, threads, strict=True):
        with job.lock:
            if t.is_alive():
                job.abandoned.set()
                if job.current is not None:
                    path, started = job.current
                    reason = f"timed out after {timeout:.1f}s"
                    job.answers.append(
                        Answer(
                            path=path,
                            started_at=started,
                            elapsed_s=round(time.time() - started, 4),
                            outcome=Outcome.TIMED_OUT,
                            reason=reason,
                            error=reason,
                        )
                    )
    return jobs


# --------------------------------------------------------------------------- records


def base_url(url: str) -> str:
    """`host:port`, `http://host:port/` or `http://host:port/x` -> `http://host:port`."""
    text = url.strip()
    if "://" not in text:
        text = "http://" + text
    parts = urlsplit(text)
    return f"{parts.scheme}://{parts.netloc}"


def _named_url(url: str) -> str:
    """The engine's URL as its records name it: never with user:password@."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}" if parts.scheme else url


def _record(
    answer: Answer,
    *,
    source: str,
    url: str,
    node_ip: str | None,
    sample: int,
    extra: Mapping[str, Any] | None = None,
) -> ProbeRecord:
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]  # never user:password@ in a name or the manifest
    meta: dict[str, Any] = {
        "url": _named_url(url),
        "path": answer.path,
        "status": answer.status,
        "elapsed_s": answer.elapsed_s,
        "error": answer.error,
        "content_type": answer.content_type,
        "truncated": answer.truncated,
    }
    if answer.fallback:
        meta["fallback"] = answer.fallback
    if answer.not_sent:
        meta["not_sent"] = True
        meta["error"] = answer.reason
    if answer.hold_back:
        meta["hold_back"] = answer.hold_back
    meta.update(extra or {})
    return ProbeRecord(
        source=source,
        target=safe_name(f"{netloc}{answer.path}"),
        outcome=answer.outcome,
        reason=answer.reason,
        node_ip=node_ip,
        sample=sample,
        started_at=answer.started_at,
        elapsed_s=answer.elapsed_s,
        meta=meta,
    )


def _probe(
    writer: BundleWriter,
    endpoints: tuple[Endpoint, ...],
    url: str,
    *,
    source: str,
    node_ip: str | None,
    sample: int,
    timeout: float,
    api_key: str | None,
) -> list[ProbeRecord]:
    base = base_url(url)
    try:
        jobs = _collect_jobs(endpoints, base, api_key, timeout)
    except Exception as exc:  # thread start failure and the like
        answer = Answer(path=endpoints[0].paths[0], started_at=time.time())
        answer.reason = answer.error = f"probe failed: {type(exc).__name__}: {exc}"
        jobs = [_Job(endpoints[0], answers=[answer])]
    return _records(writer, jobs, source=source, url=base, node_ip=node_ip, sample=sample)


def _records(
    writer: BundleWriter,
    jobs: list[_Job],
    *,
    source: str,
    url: str,
    node_ip: str | None,
    sample: int,
    meta: Mapping[str, Any] | None = None,
) -> list[ProbeRecord]:
    base = url
    records: list[ProbeRecord] = []
    for job in jobs:
        for answer in job.answers:
            rec = _record(
                answer, source=source, url=base, node_ip=node_ip, sample=sample, extra=meta
            )
            try:
                records.append(writer.add(rec, answer.body, suffix=job.endpoint.suffix))
            except Exception:  # the writer handles OSError itself; never raise anyway
                records.append(rec)
    return records


def probe_engine(
    writer: BundleWriter,
    url: str,
    *,
    node_ip: str | None,
    sample: int,
    timeout: float,
    api_key: str | None = None,
    health_generate: bool = False,
    health: bool = False,
    listed_by_router: bool = False,
    held: str | None = None,
) -> list[ProbeRecord]:
    """Probe one SGLang engine read-only; one record per HTTP request, in endpoint order.
    `listed_by_router`: an engine only a router lists, not the job's (its records say so: the
    analysis keeps it out of the verdict). `held`: why an earlier sample of this run held
    `/server_info` back from this engine (`server_info_held`): it is held back again.

    The whole probe takes at most `timeout` (+ a fraction of a second): all endpoints run
    concurrently and each request gets what is left of the budget. See the module docstring for why
    `/health` is off by default (`health=True` turns it on) and `/health_generate` is opt-in.
    """
    first = tuple(e for e in ENGINE_ENDPOINTS if e is not SERVER_INFO)
    later: tuple[Endpoint, ...] = ()
    if health:
        later = (HEALTH, *later)
    if health_generate:
        later = (*later, HEALTH_GENERATE)
    base = base_url(url)
    tic = time.monotonic()
    try:
        jobs = _collect_jobs(first, base, api_key, timeout)
        risk = server_info_risk(jobs)
        if risk is None and held is not None:
            # a scheduler seen busy or silent is not asked now that nothing shows it: the gap
            # between two of slime's own attempts (its warm-up loop) is not an idle scheduler
            risk = f"held back since {held}"
        if risk is None:
            later = (SERVER_INFO, *later)
        else:
            jobs.append(_Job(SERVER_INFO, answers=[_not_sent(SERVER_INFO.paths[0], risk)]))
        left = timeout - (time.monotonic() - tic)
        if later and left > 0.05:
            jobs.extend(_collect_jobs(later, base, api_key, left))
            _mark_silent(jobs)
        elif later:
            why = "not sent: no time left of the probe budget"
            jobs.extend(
                _Job(
                    e,
                    answers=[
                        Answer(e.paths[0], time.time(), outcome=Outcome.TIMED_OUT, reason=why)
                    ],
                )
                for e in later
            )
    except Exception as exc:  # thread start failure and the like
        answer = Answer(path=first[0].paths[0], started_at=time.time())
        answer.reason = answer.error = f"probe failed: {type(exc).__name__}: {exc}"
        jobs = [_Job(first[0], answers=[answer])]
    order = {e.paths[0]: i for i, e in enumerate((HEALTH, *ENGINE_ENDPOINTS, HEALTH_GENERATE))}
    jobs.sort(key=lambda j: order.get(j.endpoint.paths[0], len(order)))
    extra = {"listed_by_router": True} if listed_by_router else {}
    return _records(
        writer, jobs, source=SGLANG, url=base, node_ip=node_ip, sample=sample, meta=extra
    )


def _not_sent(path: str, why: str) -> Answer:
    reason = f"not sent: {why}"
    return Answer(path, time.time(), outcome=Outcome.UNAVAILABLE, reason=reason, not_sent=True)


def _parsed(jobs: list[_Job], path: str, check: Callable[[bytes], Any]) -> Any:
    for job in jobs:
        for answer in job.answers:
            if answer.path == path and answer.outcome is Outcome.OK and answer.body is not None:
                try:
                    return check(answer.body)
                except Exception:
                    return None
    return None


def server_info_held(records: Iterable[ProbeRecord], url: str, before: int) -> str | None:
    """Why a sample of this run before `before` held `/server_info` back from the engine at `url`
    (`server_info_risk`) or found its scheduler silent there (`server_info_silent`), as
    "sample K: why"; None when none did."""
    wanted = _named_url(base_url(url))
    for rec in records:
        meta = rec.meta
        if (
            rec.source != SGLANG
            or rec.sample is None
            or rec.sample >= before
            or meta.get("path") != SERVER_INFO.paths[0]
            or meta.get("url") != wanted
        ):
            continue
        if meta.get("not_sent") is True:
            return f"sample {rec.sample}: {(rec.reason or '').removeprefix('not sent: ')}"
        if isinstance(meta.get("hold_back"), str):
            return f"sample {rec.sample}: {meta['hold_back']}"
    return None


def _mark_silent(jobs: list[_Job]) -> None:
    """Mark the `/server_info` answer that `server_info_silent` says later samples must not
    repeat (its record's meta `hold_back`, which `server_info_held` reads)."""
    why = server_info_silent(jobs)
    if why is None:
        return
    for job in jobs:
        for answer in job.answers:
            if answer.path in SERVER_INFO.paths and not answer.not_sent:
                answer.hold_back = why


def server_info_silent(jobs: list[_Job]) -> str | None:
    """Why no later sample of this run may send `/server_info` again after these answers (None:
    it may): the scheduler did not answer it (slime's patch gives `internal_states: []` after
    its 2 s wait; stock SGLang times out), on a version whose endpoint one timed-out call
    poisons (`_poison`). Asking again costs the next sample those 2 s, and a call that
    times out leaves the endpoint poisoned for every later caller."""
    sent = [
        a
        for job in jobs
        for a in job.answers
        if a.path in SERVER_INFO.paths and not a.not_sent and a.status != 404
    ]
    poison = _poison(jobs) if sent else None
    if poison is None:
        return None
    answer = sent[-1]
    if answer.outcome is Outcome.TIMED_OUT:
        return f"{answer.path} timed out after {answer.elapsed_s:.1f} s; {poison}"
    try:
        info = parsers.parse_server_info(answer.body) if answer.body is not None else None
    except Exception:  # a body that is not a server_info: nothing said about the scheduler
        return None
    if info is not None and answer.outcome is Outcome.OK and info.empty_internal_states:
        return (
            f"{answer.path} answered internal_states: [] after {answer.elapsed_s:.1f} s (the "
            f"scheduler silent); {poison}"
        )
    return None


def _poison(jobs: list[_Job]) -> str | None:
    """On a version whose `/server_info` one timed-out call poisons (before 0.5.23, or unknown,
    as `/v1/loads` reports it), what that costs, in words; None on a recovering version."""
    load = _parsed(jobs, "/v1/loads", parsers.parse_loads) or _parsed(
        jobs, "/get_load", parsers.parse_loads
    )
    version = load.version if load is not None else None
    parsed_version = parsers.version_tuple(version)
    if parsed_version is not None and parsed_version >= parsers.RECOVERING_VERSION:
        return None
    named = f"SGLang {version}" if version else "an SGLang of unknown version"
    return (
        f"on {named} one /server_info that times out leaves the endpoint answering "
        "internal_states: [] for every later caller (communicator.py:38-58)"
    )


def server_info_risk(jobs: list[_Job]) -> str | None:
    """Why `/server_info` must not be sent after these first reads (None: send it).

    On a version whose `/server_info` stays poisoned after one timed-out call (or an unknown one),
    it is sent only when the HTTP process answered and nothing shows the scheduler holding work: a
    busy or silent scheduler may not answer within slime's 2 s, and that one timeout would leave
    every later `/server_info` (slime's, the operator's, the doctor's next sample) answering
    `internal_states: []` until the engine restarts."""
    poison = _poison(jobs)
    if poison is None:
        return None
    load = _parsed(jobs, "/v1/loads", parsers.parse_loads) or _parsed(
        jobs, "/get_load", parsers.parse_loads
    )
    answers = [a for job in jobs for a in job.answers]
    if not any(a.outcome is Outcome.OK for a in answers) and any(
        a.outcome is Outcome.TIMED_OUT for a in answers
    ):
        # (refused everywhere: nothing listens, nothing to poison; the call is made and refused)
        return f"the HTTP process did not answer the first reads in time; {poison}"
    if load is not None and load.known and (load.running or 0) + (load.waiting or 0) > 0:
        return (
            f"/v1/loads shows {load.running} running, {load.waiting} waiting (the scheduler is "
            f"busy); {poison}"
        )
    metrics = _parsed(jobs, "/metrics", parsers.parse_metrics_page)
    if isinstance(metrics, SglangMetrics):
        held = sorted(
            f"{p} x{n:g}"
            for p, n in metrics.http_active.items()
            if n > 0 and p not in parsers.HTTP_ONLY_PATHS
        )
        if held:
            return (
                "requests in flight at scheduler-bound endpoints (sglang:http_requests_active: "
                f"{', '.join(held)}); {poison}"
            )
    return None


def probe_router(
    writer: BundleWriter,
    url: str,
    *,
    node_ip: str | None,
    sample: int,
    timeout: float,
    api_key: str | None = None,
) -> list[ProbeRecord]:
    """Ask slime's router which engines it knows: GET /workers, or /list_workers on old routers."""
    return _probe(
        writer,
        ROUTER_ENDPOINTS,
        url,
        source=ROUTER,
        node_ip=node_ip,
        sample=sample,
        timeout=timeout,
        api_key=api_key,
    )


def probe_router_metrics(
    writer: BundleWriter,
    url: str,
    *,
    node_ip: str | None,
    sample: int,
    timeout: float,
) -> list[ProbeRecord]:
    """Read the router's Prometheus page (`url` is one of the router process's other listening
    ports: slime starts the router with a `prometheus_port`): its per-worker in-flight counts."""
    return _probe(
        writer,
        ROUTER_METRICS_ENDPOINTS,
        url,
        source=ROUTER,
        node_ip=node_ip,
        sample=sample,
        timeout=timeout,
        api_key=None,  # the Prometheus exporter takes no key
    )
