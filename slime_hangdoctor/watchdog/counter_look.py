"""The watchdog's cheapest look: the engines' work counters, read twice across the window.

After a look that ran the analysis and judged the job progressing on its engines' token counters,
the next runs first read only what that judgement rested on (the remembered `CounterPlan`): each of
those engines' `/metrics`, at the window's start and end, by the same bounded GET as the engine
probe (`collect.sglang.http_get`: timeouts, a body cap, no proxy), and whether this node's slime
processes of that look are still there (pid and start time, psutil). Nothing else is read, so
nothing else is imported: no Ray client, no process or socket scan, no bundle, no analysis. It
also reads the CPU times of the plan's request-path processes (the router, the engines' HTTP
processes) at both ends of the window: a hop CPU-bound over it may hold the job's requests, which
the counters alone cannot tell. The
judgement of what was read is pure and lives in `watchdog/counter_verdict.py`.

`/metrics` is answered by the engine's HTTP process from the Prometheus registry the scheduler
writes to (no scheduler round trip, no side effect), as the analysed look reads it every run.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from slime_hangdoctor.errors import ParseError
from slime_hangdoctor.http_facts import SglangMetrics
from slime_hangdoctor.outcome import Outcome
from slime_hangdoctor.watchdog.state import CounterPlan

# A process's start time as psutil reads it twice (boot time + jiffies): equal to well under this.
START_TIME_SLACK_S = 0.05


@dataclass(frozen=True)
class CounterRead:
    """One engine's `/metrics` at one moment: its counters, or why there are none."""

    metrics: SglangMetrics | None
    outcome: Outcome = Outcome.OK  # as the engine probe's record would say
    problem: str | None = None  # "timed out after 1.0s", "HTTP 503", "not Prometheus text: ..."


@dataclass(frozen=True)
class EngineCounters:
    url: str
    first: CounterRead
    last: CounterRead


@dataclass(frozen=True)
class CounterReading:
    """What one counters-only look read."""

    engines: tuple[EngineCounters, ...]
    gone: tuple[int, ...]  # pids of the plan's processes no longer there (or another process's)
    window_s: float  # from the start of the first reads to the start of the last
    elapsed_s: float
    # (pid, CPU seconds over the window, runnable at both reads, seconds its main thread was on a
    # CPU or waiting for one (None: /proc/<pid>/schedstat not read)) of the plan's request-path
    # processes that both reads saw
    hop_cpu: tuple[tuple[int, float, bool, float | None], ...] = ()


def read_counters(
    plan: CounterPlan, *, api_key: str | None, window_s: float, timeout_s: float
) -> CounterReading:
    """Read the plan's engines at the window's start and end, and check its processes. Never
    raises for what an engine or the process table answers; `timeout_s` bounds each read."""
    cpu_before = cpu_times(plan.hops)
    started = time.monotonic()
    first = _read_all(plan.engines, api_key, timeout_s)
    second_at = started + window_s
    time.sleep(max(0.0, second_at - time.monotonic()))
    window = time.monotonic() - started
    last = _read_all(plan.engines, api_key, timeout_s)
    cpu_after = cpu_times(plan.hops)
    engines = tuple(EngineCounters(u, first[u], last[u]) for u in plan.engines)
    hop_cpu = tuple(
        _hop_reading(pid, cpu_before[pid], cpu_after[pid]) for pid in cpu_before if pid in cpu_after
    )
    return CounterReading(
        engines,
        gone_processes(plan.processes),
        round(window, 3),
        time.monotonic() - started,
        hop_cpu,
    )


def cpu_times(
    processes: tuple[tuple[int, float], ...],
) -> dict[int, tuple[float, bool, float | None]]:
    """User + system CPU seconds, whether it is runnable (state R), and the seconds its main thread
    has been on a CPU or waiting for one (/proc/<pid>/schedstat; None where unreadable), of each
    process that is still the plan's (its start time)."""
    if not processes:
        return {}
    import psutil

    out: dict[int, tuple[float, bool, float | None]] = {}
    for pid, start in processes:
        try:
            proc = psutil.Process(pid)
            with proc.oneshot():
                if abs(proc.create_time() - start) > START_TIME_SLACK_S:
                    continue
                times, status = proc.cpu_times(), proc.status()
        except (psutil.Error, OSError, ValueError):
            continue
        out[pid] = (times.user + times.system, status == psutil.STATUS_RUNNING, _wanted_s(pid))
    return out


def _hop_reading(
    pid: int,
    before: tuple[float, bool, float | None],
    after: tuple[float, bool, float | None],
) -> tuple[int, float, bool, float | None]:
    wanted = None if before[2] is None or after[2] is None else max(0.0, after[2] - before[2])
    return (pid, max(0.0, after[0] - before[0]), before[1] and after[1], wanted)


def _wanted_s(pid: int) -> float | None:
    from slime_hangdoctor.parsers.kernel import parse_schedstat

    try:
        with open(f"/proc/{pid}/schedstat") as fh:
            sched = parse_schedstat(fh.read())
    except (OSError, ParseError):
        return None
    return (sched.run_ns + sched.wait_ns) / 1e9


def gone_processes(processes: tuple[tuple[int, float], ...]) -> tuple[int, ...]:
    """The pids whose process is gone (a zombie too), or whose pid another process now holds."""
    import psutil

    gone: list[int] = []
    for pid, start in processes:
        try:
            proc = psutil.Process(pid)
            with proc.oneshot():
                now_start, status = proc.create_time(), proc.status()
        except (psutil.Error, OSError, ValueError):
            gone.append(pid)
            continue
        if abs(now_start - start) > START_TIME_SLACK_S or status == psutil.STATUS_ZOMBIE:
            gone.append(pid)
    return tuple(gone)


def _read_all(
    urls: tuple[str, ...], api_key: str | None, timeout_s: float
) -> dict[str, CounterRead]:
    """One `/metrics` read of every engine at once (a thread each), joined by the deadline."""
    deadline = time.monotonic() + timeout_s
    out: dict[str, CounterRead] = {}

    def read(url: str) -> None:
        out[url] = _read(url, api_key, timeout_s, deadline)

    threads = [threading.Thread(target=read, args=(u,), daemon=True) for u in urls]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, deadline + 0.3 - time.monotonic()))
    late = CounterRead(None, Outcome.TIMED_OUT, f"no answer within {timeout_s:.1f}s")
    return {u: out.get(u, late) for u in urls}


def _read(url: str, api_key: str | None, timeout_s: float, deadline: float) -> CounterRead:
    from slime_hangdoctor.collect.sglang import http_get
    from slime_hangdoctor.parsers.sglang import parse_metrics_page

    answer = http_get(url, "/metrics", timeout=timeout_s, api_key=api_key, deadline=deadline)
    if answer.outcome is not Outcome.OK or answer.body is None:
        return CounterRead(None, answer.outcome, answer.reason or answer.outcome.value)
    try:
        return CounterRead(parse_metrics_page(answer.body))
    except ParseError as exc:
        return CounterRead(None, Outcome.FAILED, f"not SGLang's /metrics ({exc})")
