"""Read the Ray cluster through its dashboard (state API, Job API, node summary, tracebacks).

Everything goes over plain HTTP with a per-call timeout and a body cap; bodies are stored verbatim.
The dashboard's token (Ray >= 2.52 token auth) is sent as ``Authorization: Bearer <token>``, which
is what Ray's own HTTP clients send.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from slime_hangdoctor.bundle import BundleWriter, ProbeClock, ProbeRecord
from slime_hangdoctor.collect.node import partial_snapshot
from slime_hangdoctor.collect.options import resolve_token
from slime_hangdoctor.outcome import Outcome
from slime_hangdoctor.parsers import ray_state
from slime_hangdoctor.parsers.pyspy import DASHBOARD_TRACEBACK
from slime_hangdoctor.parsers.ray_state import JOB_RUNNING, RAY_DASHBOARD, RAY_STATE

MAX_BODY = 64 * 1024 * 1024
PROFILING_HELP = "profiling disabled on this cluster (RAY_DASHBOARD_ENABLE_PROFILING=1)"
TOKEN_HELP = (
    "the dashboard wants Ray's auth token: pass --ray-token, or set RAY_AUTH_TOKEN / "
    "RAY_AUTH_TOKEN_PATH (default ~/.ray/auth_token)"
)


# What to ask the dashboard: the source's table, beside its parsers (parsers/ray_state.py).
Endpoint = ray_state.StateEndpoint
STATE_ENDPOINTS = ray_state.STATE_ENDPOINTS


@dataclass(frozen=True)
class HttpResult:
    """One GET: the answer, or why there was none."""

    url: str
    status: int | None
    body: bytes = b""
    content_type: str | None = None
    elapsed_s: float = 0.0
    error: str | None = None  # no HTTP answer: "connection refused", "timed out after 2.0s", ...
    timed_out: bool = False
    truncated: bool = False

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    @property
    def is_json(self) -> bool:
        return "json" in (self.content_type or "")


class DashboardClient:
    """A tiny GET-only client for one dashboard. Thread-safe (no shared session).

    `token` None means: find Ray's token as Ray does (`resolve_token`); pass "" to send none.
    """

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        timeout: float = 2.0,
        max_body: int = MAX_BODY,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.max_body = max_body
        self._token = resolve_token(token) if token is None else (token.strip() or None)

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._token}"} if self._token else {}

    def url(self, path: str, params: tuple[tuple[str, str], ...] | dict[str, str] = ()) -> str:
        query = urlencode(list(params.items()) if isinstance(params, dict) else list(params))
        return f"{self.base_url}{path}" + (f"?{query}" if query else "")

    def get(
        self,
        path: str,
        params: tuple[tuple[str, str], ...] | dict[str, str] = (),
        *,
        timeout: float | None = None,
        max_body: int | None = None,
    ) -> HttpResult:
        """GET `path`; never raises (transport failures come back in `error`). `max_body`: a
        smaller body cap for this GET than the client's."""
        from slime_hangdoctor.collect.http import BodyDeadline, get

        url = self.url(path, params)
        limit = max(0.05, self.timeout if timeout is None else timeout)
        t0 = time.monotonic()
        try:
            cap = self.max_body if max_body is None else min(max_body, self.max_body)
            got = get(url, self.headers, timeout=limit, deadline=t0 + limit, max_body=cap)
        except BodyDeadline:
            return HttpResult(
                url,
                None,
                elapsed_s=time.monotonic() - t0,
                error=f"timed out after {limit:.1f}s",
                timed_out=True,
            )
        except Exception as exc:  # noqa: BLE001 - a transport failure of any kind is an answer
            error, timed_out = _connection_error(exc)
            if timed_out:
                error = f"timed out after {limit:.1f}s"
            return HttpResult(
                url, None, elapsed_s=time.monotonic() - t0, error=error, timed_out=timed_out
            )
        return HttpResult(
            url,
            got.status,
            got.body,
            got.content_type,
            time.monotonic() - t0,
            truncated=got.truncated,
        )


def _connection_error(exc: BaseException) -> tuple[str, bool]:
    """(error text, timed out) of a transport failure."""
    from slime_hangdoctor.collect.http import Failure, classify

    kind, text = classify(exc)
    if kind is Failure.OTHER or kind is Failure.UNREACHABLE:
        return f"connection failed: {text}", False
    return kind.value, kind is Failure.TIMEOUT


# --------------------------------------------------------------------------- cluster state


def capture_state(
    writer: BundleWriter,
    client: DashboardClient,
    *,
    sample: int | None,
    timeout: float | None = None,
) -> list[ProbeRecord]:
    """Store the dashboard's view of the cluster (STATE_ENDPOINTS), verbatim; never raises.
    After the first sample, not what does not change (an endpoint's `once`: Ray's version).

    Every endpoint is asked at once, each GET under `timeout` (default: the client's), so a slow
    dashboard costs one timeout, not one per endpoint."""
    limit = max(0.05, client.timeout if timeout is None else timeout)
    endpoints = [e for e in STATE_ENDPOINTS if not (sample and e.once)]
    return _capture_all(writer, client, endpoints, sample, limit, "ray-state")


def history_endpoint(job_id: str) -> Endpoint:
    """The tasks of one job, every state (`ray_state.TASK_LIMIT` rows at most)."""
    h = ray_state.TASK_HISTORY
    return dataclasses.replace(
        h,
        target=f"{h.target}{job_id}",
        params=(*h.params, *ray_state.filters(("job_id", "=", job_id))),
    )


def capture_task_history(
    writer: BundleWriter,
    client: DashboardClient,
    *,
    sample: int | None,
    timeout: float | None = None,
) -> list[ProbeRecord]:
    """At the second sample, the task history of each RUNNING job the state capture stored
    (finished, failed, queued and running tasks, with parent ids and times): one bounded GET per
    job, all at once; never raises. A background dashboard probe (collect/run_dashboard.py BACKGROUND_DASHBOARD_PROBES)."""
    if not sample:
        return []
    try:
        jobs = partial_snapshot(writer).joined(RAY_STATE).jobs
    except Exception:  # noqa: BLE001 - a collector never raises past itself
        return []
    job_ids = sorted({j.job_id for j in jobs if j.status == JOB_RUNNING and j.job_id})
    endpoints = [history_endpoint(j) for j in job_ids]
    if not endpoints:
        return []
    limit = max(0.05, client.timeout if timeout is None else timeout)
    return _capture_all(writer, client, endpoints, sample, limit, "ray-history")


def _capture_all(
    writer: BundleWriter,
    client: DashboardClient,
    endpoints: Sequence[Endpoint],
    sample: int | None,
    limit: float,
    thread_prefix: str,
) -> list[ProbeRecord]:
    """GET every endpoint at once, each under `limit`; an endpoint with no answer by then is a
    FAILED record saying why. One record per endpoint, in their order."""
    from slime_hangdoctor.collect.daemon_calls import gather

    def failed(ep: Endpoint, fut: cf.Future[ProbeRecord]) -> ProbeRecord:
        record = ProbeRecord(
            RAY_DASHBOARD,
            ep.target,
            Outcome.FAILED,
            _unfinished(fut),
            sample=sample,
            started_at=time.time(),
            meta={"endpoint": ep.path},
        )
        return writer.add(record)

    return gather(
        lambda ep: _capture_one(writer, client, ep, sample, limit),
        endpoints,
        workers=len(endpoints),
        name=thread_prefix,
        wait_s=limit + 1.0,
        unfinished=failed,
    )


def _unfinished(fut: cf.Future[ProbeRecord]) -> str:
    if not fut.done():
        return "no answer before the capture's deadline"
    if fut.cancelled():
        return "not run: the capture's deadline passed"
    return f"probe failed: {fut.exception()!r}"[:300]


def _capture_one(
    writer: BundleWriter, client: DashboardClient, ep: Endpoint, sample: int | None, timeout: float
) -> ProbeRecord:
    started = time.time()
    res = client.get(ep.path, ep.params, timeout=timeout)
    outcome, reason = classify(res)
    meta = _meta(res, endpoint=ep.path, query=urlencode(list(ep.params)))
    record = ProbeRecord(
        RAY_DASHBOARD,
        ep.target,
        outcome,
        reason,
        sample=sample,
        started_at=started,
        elapsed_s=res.elapsed_s,
        meta=meta,
    )
    data = scrub_env_values(res.body) if res.status is not None else None
    if res.status is not None and data is None:
        record = dataclasses.replace(
            record,
            outcome=Outcome.FAILED if outcome is Outcome.OK else outcome,
            reason=f"{reason}; {UNSCRUBBED}" if reason else UNSCRUBBED,
        )
    return writer.add(record, data, suffix=".json" if res.is_json else ".txt")


UNSCRUBBED = "answer not kept: it holds runtime-env values that could not be blanked (not JSON)"


def scrub_env_values(body: bytes) -> bytes | None:
    """The body with the values of every runtime-env `env_vars` entry blanked (allow-listed keys
    kept), in plain objects and in `serialized_runtime_env` strings alike.

    Ray's state and Job APIs echo each job's and actor's runtime env, whose env_vars carry what
    jobs are given (WANDB_API_KEY, HF_TOKEN, ...), under names no pattern can know. Bodies without
    `env_vars` are kept byte for byte; others are re-serialised (same data, compact JSON). A body
    with `env_vars` that is not JSON (cut at the body cap, damaged) cannot be scrubbed by its
    structure: None, it is not kept (the record says why)."""
    if b"env_vars" not in body:
        return body
    try:
        return json.dumps(_scrub(json.loads(body))).encode("utf-8")
    except (TypeError, ValueError, RecursionError):
        return None


def _scrub(value: Any) -> Any:
    from slime_hangdoctor.redact import ENV_ALLOWLIST, REDACTED

    if isinstance(value, list):
        return [_scrub(v) for v in value]
    if not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    for key, item in value.items():
        if key == "env_vars" and isinstance(item, dict):
            out[key] = {k: (v if k in ENV_ALLOWLIST else REDACTED) for k, v in item.items()}
        elif isinstance(item, str) and "env_vars" in item and key.endswith("runtime_env"):
            out[key] = _scrub_serialized(item)
        else:
            out[key] = _scrub(item)
    return out


def _scrub_serialized(text: str) -> str:
    try:
        inner = json.loads(text)
    except (ValueError, RecursionError):
        return text
    return json.dumps(_scrub(inner))


def classify(res: HttpResult) -> tuple[Outcome, str | None]:
    """Outcome and reason of one dashboard answer."""
    if res.status is None:
        if res.timed_out:
            return Outcome.TIMED_OUT, res.error
        if res.error == "connection refused":
            return Outcome.UNAVAILABLE, res.error
        return Outcome.FAILED, res.error
    if res.status == 200:
        if res.truncated:
            return Outcome.FAILED, f"answer larger than {len(res.body)} bytes: truncated"
        error = _envelope_error(res)
        return (
            (Outcome.FAILED, f"the dashboard answered an error: {error}")
            if error
            else (
                Outcome.OK,
                None,
            )
        )
    first = _first_line(res.text)
    if res.status == 401:
        return Outcome.DENIED, f"HTTP 401 {first} - {TOKEN_HELP}"
    if res.status == 403:
        return Outcome.DENIED, f"HTTP 403 {first}"
    if res.status == 404:
        return Outcome.UNAVAILABLE, "HTTP 404: this Ray version has no such endpoint"
    return Outcome.FAILED, f"HTTP {res.status} {first}".strip()


def _envelope_error(res: HttpResult) -> str | None:
    """The `msg` of a ``{"result": false, "msg": ...}`` answer (GCS down, bad filter, ...)."""
    if not res.is_json or not res.body.lstrip().startswith(b"{"):
        return None
    try:
        doc = json.loads(res.body)
    except (ValueError, RecursionError):
        return None
    if isinstance(doc, dict) and doc.get("result") is False:
        return str(doc.get("msg") or "result=false")[:300]
    return None


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:240]
    return ""


def _meta(res: HttpResult, **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {
        **extra,
        "status": res.status,
        "content_type": res.content_type,
        "elapsed_s": round(res.elapsed_s, 4),
    }
    if res.error:
        meta["error"] = res.error
    return meta


# --------------------------------------------------------------------------- tracebacks


def worker_traceback(
    writer: BundleWriter,
    client: DashboardClient,
    *,
    pid: int,
    node_ip: str | None,
    sample: int | None,
    timeout: float,
    native: bool = False,
) -> ProbeRecord:
    """Ray's own py-spy dump of a worker (``/worker/traceback``), as text; never raises."""
    probe = ProbeClock(DASHBOARD_TRACEBACK, f"pid{pid}", node_ip, sample)
    meta: dict[str, Any] = {"pid": pid, "native": native, "format": "text"}

    def done(
        outcome: Outcome, reason: str | None, data: bytes | None = None, elapsed: float = 0.0
    ) -> ProbeRecord:
        # the HTTP call's own time, not the probe's so far
        record = dataclasses.replace(probe.record(outcome, reason, **meta), elapsed_s=elapsed)
        return writer.add(record, data, suffix=".txt")

    try:
        if not node_ip:
            return done(Outcome.UNAVAILABLE, "the Ray node IP of this process is unknown")
        params = (("pid", str(pid)), ("ip", node_ip), ("native", "1" if native else "0"))
        res = client.get("/worker/traceback", params, timeout=timeout)
        meta.update(_meta(res, endpoint="/worker/traceback"))
        outcome, reason = _traceback_outcome(res, pid)
        data = res.body if res.status == 200 and outcome is Outcome.OK else None
        return done(outcome, reason, data, res.elapsed_s)
    except Exception as exc:  # a collector never raises past itself
        return done(Outcome.FAILED, f"traceback request failed: {exc!r}"[:300])


def _traceback_outcome(res: HttpResult, pid: int) -> tuple[Outcome, str | None]:
    if res.status == 200:
        if not res.body.strip():
            return Outcome.FAILED, "the dashboard answered an empty traceback"
        return Outcome.OK, None
    if res.status == 403 and "auth" not in res.text.lower():
        return Outcome.DENIED, PROFILING_HELP
    if res.status == 500:
        return Outcome.FAILED, f"the dashboard could not dump pid {pid}: {_first_line(res.text)}"
    return classify(res)
