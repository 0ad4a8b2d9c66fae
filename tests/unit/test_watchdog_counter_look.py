"""The watchdog's counters-only look (watchdog/counter_look.py, counter_verdict.py, look.counter_plan).

Real parts: engines are real HTTP servers on 127.0.0.1 answering `/metrics` with the SGLang
stand-in's recorded pages (tests/fixtures/sglang/metrics_{idle,busy,after,stuck}.txt, byte for byte,
in the order a test names); processes are real children of this test, read by psutil. The
equivalence with the analysis is checked on every recorded bundle of tests/fixtures: wherever the
counters-only judgement of a bundle's own two `/metrics` readings says "progressing", the analysis of
that bundle says so too."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psutil
import pytest

from slime_hangdoctor.http_facts import SglangMetrics
from slime_hangdoctor.markers import progress_markers
from slime_hangdoctor.parsers.kernel import SPEC as KERNEL
from slime_hangdoctor.parsers.processes import SPEC as PROCESSES
from slime_hangdoctor.parsers.sglang import counter_rises, parse_metrics_page
from slime_hangdoctor.pipeline import Analysed, analyse_bundle
from slime_hangdoctor.topology import MemberKind
from slime_hangdoctor.verdict import Status
from slime_hangdoctor.watchdog.counter_look import (
    CounterRead,
    CounterReading,
    EngineCounters,
    read_counters,
)
from slime_hangdoctor.watchdog.counter_verdict import REFRESH_S, judge_counters, usable_plan
from slime_hangdoctor.watchdog.look import counter_plan
from slime_hangdoctor.watchdog.state import CounterPlan, WatchState, load_state, save_state
from tests.unit.test_golden_verdicts import BUNDLES

PAGES = Path(__file__).resolve().parents[1] / "fixtures" / "sglang"


class _Engine:
    """A real HTTP server whose `/metrics` answers the recorded pages named, one per request (the
    last one again once they are used up); `close()` makes it refuse connections."""

    def __init__(self, *pages: str) -> None:
        bodies = [(PAGES / f"metrics_{p}.txt").read_bytes() for p in pages]
        served: list[int] = []

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                if self.path != "/metrics":
                    self.send_error(404)
                    return
                body = bodies[min(len(served), len(bodies) - 1)]
                served.append(1)
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.served = served
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture()
def engines() -> Iterator[list[_Engine]]:
    made: list[_Engine] = []
    yield made
    for e in made:
        e.close()


def _engine(made: list[_Engine], *pages: str) -> _Engine:
    made.append(_Engine(*pages))
    return made[-1]


@pytest.fixture()
def child() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    proc.kill()
    proc.wait()


def _started(pid: int) -> float:
    return psutil.Process(pid).create_time()


def _plan(
    urls: list[str], processes: tuple[tuple[int, float], ...] = (), at: float = 0.0
) -> CounterPlan:
    return CounterPlan(at or time.time(), "http://127.0.0.1:8265", tuple(urls), processes)


def _read(plan: CounterPlan) -> CounterReading:
    return read_counters(plan, api_key=None, window_s=0.2, timeout_s=2.0)


def test_rising_counters_on_every_engine_answer_progressing(
    engines: list[_Engine], child: subprocess.Popen[bytes]
) -> None:
    a, b = _engine(engines, "busy", "after"), _engine(engines, "idle", "busy")
    plan = _plan([a.url, b.url], ((child.pid, _started(child.pid)),))
    reading = _read(plan)
    assert reading.window_s >= 0.2 and reading.gone == ()
    judged = judge_counters(plan, reading, time.time())
    v = judged.verdict
    assert v is not None and v.status is Status.PROGRESSING, judged.why
    assert v.summary.startswith(f"Progressing: engine {a.url}: decode tokens +75")
    progress = next(f for f in v.findings if f.rule == "progress")
    assert progress.evidence[1].startswith(f"engine {b.url}: decode tokens +172")
    assert any(f.rule == "watchdog.counter_look" for f in v.findings)
    # the same marker names and values as the analysed look's (markers.engine_markers)
    after = parse_metrics_page((PAGES / "metrics_after.txt").read_bytes())
    assert judged.markers[f"sglang:{a.url}:decode_tokens_total"] == repr(
        float(after.decode_tokens_total or 0)
    )
    assert len(a.served) == len(b.served) == 2


def test_one_flat_engine_leaves_the_answer_to_the_analysis(engines: list[_Engine]) -> None:
    a, b = _engine(engines, "busy", "after"), _engine(engines, "stuck", "stuck")
    plan = _plan([a.url, b.url])
    judged = judge_counters(plan, _read(plan), time.time())
    assert judged.verdict is None and f"flat for 0.2 s at {b.url}" in judged.why


def test_a_silent_engine_leaves_the_answer_to_the_analysis(engines: list[_Engine]) -> None:
    a, b = _engine(engines, "busy", "after"), _engine(engines, "busy", "after")
    b.close()
    plan = _plan([a.url, b.url])
    judged = judge_counters(plan, _read(plan), time.time())
    assert judged.verdict is None
    assert f"no counters from {b.url} (connection refused)" in judged.why


def test_a_process_gone_or_replaced_leaves_the_answer_to_the_analysis(
    engines: list[_Engine], child: subprocess.Popen[bytes]
) -> None:
    a = _engine(engines, "busy", "after", "busy", "after", "busy", "after")
    started = _started(child.pid)
    # another process under the remembered pid: its start time differs
    replaced = _plan([a.url], ((child.pid, started - 5.0),))
    judged = judge_counters(replaced, _read(replaced), time.time())
    assert judged.verdict is None and f"process(es) {child.pid} gone" in judged.why
    child.kill()
    child.wait()
    gone = _plan([a.url], ((child.pid, started),))
    judged = judge_counters(gone, _read(gone), time.time())
    assert judged.verdict is None and f"process(es) {child.pid} gone" in judged.why


def test_a_zombie_is_gone(engines: list[_Engine]) -> None:
    a = _engine(engines, "busy", "after")
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 10
    while psutil.Process(proc.pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    try:
        plan = _plan([a.url], ((proc.pid, _started(proc.pid)),))
        assert _read(plan).gone == (proc.pid,)
    finally:
        proc.wait()


def test_a_cpu_bound_hop_of_the_request_path_leaves_the_answer_to_the_analysis(
    engines: list[_Engine], child: subprocess.Popen[bytes]
) -> None:
    """Issue 34 item 2: the engines' tokens count only while the job's requests pass their path;
    a hop of it CPU-bound over the window may hold them (what the counters cannot tell), so the
    run takes the analysed look. A real spinning process and a real sleeping one, read by psutil."""
    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        hops = ((spin.pid, _started(spin.pid)), (child.pid, _started(child.pid)))
        a = _engine(engines, "busy", "after", "busy", "after")
        plan = dataclasses.replace(_plan([a.url]), hops=hops)
        reading = read_counters(plan, api_key=None, window_s=1.0, timeout_s=2.0)
        read = {pid: (cpu, runnable, wanted) for pid, cpu, runnable, wanted in reading.hop_cpu}
        assert set(read) == {spin.pid, child.pid}, read
        assert read[child.pid][0] < 0.1 and not read[child.pid][1], read
        # the spinner: a whole core, or on a CPU or waiting for one (schedstat) where the box
        # gives it less, or runnable at both reads where schedstat is not there
        cpu, runnable, wanted = read[spin.pid]
        if wanted is not None:
            assert wanted >= 0.8 * reading.window_s, (read, reading.window_s)
        assert runnable or cpu >= 0.8 * reading.window_s or wanted is not None, read
        judged = judge_counters(plan, reading, time.time())
        assert judged.verdict is None, judged.why
        assert f"process {spin.pid} on the rollout's request path was CPU-bound" in judged.why
        idle = dataclasses.replace(plan, hops=hops[1:])
        assert judge_counters(idle, _read(idle), time.time()).verdict is not None
    finally:
        spin.kill()
        spin.wait()


def test_a_plan_is_read_only_for_its_address_and_while_young() -> None:
    plan = _plan(["http://127.0.0.1:1"], at=1000.0)
    assert usable_plan(plan, "http://127.0.0.1:8265", 1000.0 + REFRESH_S - 1) is None
    assert usable_plan(plan, "auto", 1001.0) == "the plan is for another address"
    assert "taken again every" in (usable_plan(plan, plan.target, 1000.0 + REFRESH_S) or "")
    assert usable_plan(plan, plan.target, 999.0) is not None  # the clock went back
    assert usable_plan(None, plan.target, 1000.0) == "no plan"


def test_the_plan_survives_the_state_file_and_a_bad_one_is_dropped(tmp_path: Path) -> None:
    plan = dataclasses.replace(
        _plan(["http://127.0.0.1:1", "https://[::1]:2"], ((7, 1.5),), at=1000.0), hops=((7, 1.5),)
    )
    path = tmp_path / "state.json"
    save_state(path, WatchState(counter_plan=plan))
    assert load_state(path).state.counter_plan == plan
    good = json.loads(path.read_text())["counter_plan"]
    bad = [
        {**good, "at": "x"},
        {**good, "at": float("inf")},
        {**good, "target": 3},
        {**good, "engines": []},
        {**good, "engines": ["file:///etc/passwd"]},
        {**good, "engines": ["http://x"] * 300},
        {**good, "processes": [[7]]},
        {**good, "processes": [[True, 1.0]]},
        {**good, "processes": [[-1, 1.0]]},
        {**good, "processes": [["7", 1.0]]},
        {**good, "hops": [[7]]},
        {**good, "hops": "7"},
        [],
    ]
    for variant in bad:
        data = json.loads(path.read_text())
        data["counter_plan"] = variant
        path.write_text(json.dumps(data))
        loaded = load_state(path)
        assert loaded.state.counter_plan is None and loaded.problem is None, variant


def _pairs(analysed: Analysed) -> dict[str, tuple[SglangMetrics, SglangMetrics]]:
    """Each engine's `/metrics` at the bundle's first and last sample."""
    assert analysed.snapshot is not None
    by_url: dict[str, dict[int, SglangMetrics]] = {}
    for obs in analysed.snapshot.http:
        if isinstance(obs.parsed, SglangMetrics):
            by_url.setdefault(obs.answer.url, {})[obs.sample] = obs.parsed
    return {u: (s[min(s)], s[max(s)]) for u, s in by_url.items() if len(s) >= 2}


def test_where_the_counters_say_progressing_so_does_the_analysis() -> None:
    """On every recorded bundle with an engine read twice: the counters-only judgement of the
    bundle's own two readings (all its engines in the plan, and each one alone) answers only where
    the analysis says progressing; and the plan a progressing look leaves names exactly the engines
    whose counters rose, and processes of that look only."""
    answered: list[str] = []
    compared = 0
    for name in sorted(BUNDLES):
        looked = analyse_bundle(BUNDLES[name])
        pairs = _pairs(looked)
        if not pairs:
            continue
        compared += 1
        if _agrees(name, looked, pairs):
            answered.append(name)
    # the recorded set holds progressing jobs and hung ones with engines: both sides are exercised
    assert compared >= 20 and {"demo-none", "demo-slow"} <= set(answered), (compared, answered)


def _agrees(
    name: str, looked: Analysed, pairs: dict[str, tuple[SglangMetrics, SglangMetrics]]
) -> bool:
    """Checks one bundle; whether the counters judgement of all its engines answered."""
    plan = dataclasses.replace(_plan(sorted(pairs), at=1000.0), hops=_hops(looked))
    reading = CounterReading(
        tuple(
            EngineCounters(u, CounterRead(a), CounterRead(b)) for u, (a, b) in sorted(pairs.items())
        ),
        gone=(),
        window_s=looked.diagnosis.verdict.window_s,
        elapsed_s=0.0,
        hop_cpu=_hop_cpu(looked, plan.hops),
    )
    status = looked.diagnosis.verdict.status
    plans = [(plan, reading)] + [  # and each engine alone, as a plan of one engine
        (dataclasses.replace(plan, engines=(e.url,)), dataclasses.replace(reading, engines=(e,)))
        for e in reading.engines
    ]
    verdicts = [judge_counters(p, r, 1001.0).verdict for p, r in plans]
    for v in verdicts:
        assert v is None or status is Status.PROGRESSING, name
    # the plan of a live look on this bundle (what the collector adds: work moved, its node)
    live = dataclasses.replace(looked, work_moved=True, node_ip=_scan_node(looked))
    made = counter_plan(live, "t", 1000.0)
    rose = tuple(sorted(u for u, (a, b) in pairs.items() if counter_rises(a, b)))
    if status is not Status.PROGRESSING or not rose:
        assert made is None, name
        return verdicts[0] is not None
    assert made is not None and made.engines == rose, name
    assert looked.topology is not None and looked.snapshot is not None
    assert {pid for pid, _ in made.processes} <= {m.pid for m in looked.topology.members}
    markers = progress_markers(looked.snapshot, looked.topology)
    assert all(f"sglang:{u}:decode_tokens_total" in markers for u in made.engines), name
    return verdicts[0] is not None


def _hops(analysed: Analysed) -> tuple[tuple[int, float], ...]:
    """The request-path processes a live look's plan remembers (look.counter_plan's rule)."""
    assert analysed.topology is not None
    return tuple(
        (m.pid, 0.0)
        for m in analysed.topology.members
        if m.kind in (MemberKind.ROUTER, MemberKind.HTTP_SERVER)
    )


def _hop_cpu(
    analysed: Analysed, hops: tuple[tuple[int, float], ...]
) -> tuple[tuple[int, float, bool, float | None], ...]:
    """Each hop's CPU seconds between the bundle's two process samples, whether it was runnable at
    both, and its main thread's time on or waiting for a CPU where the kernel source read it (its
    recorded readings)."""
    assert analysed.snapshot is not None
    seen: dict[int, dict[int, tuple[float, bool]]] = {}
    for obs in analysed.snapshot.facts(PROCESSES):
        for p in obs.fact:
            if p.cpu_seconds is not None:
                seen.setdefault(p.pid, {})[obs.sample] = (p.cpu_seconds, p.status == "running")
    sched: dict[int, dict[int, int]] = {}
    for kobs in analysed.snapshot.facts(KERNEL):
        for k in kobs.fact.processes:
            if k.sched is not None:
                sched.setdefault(k.pid, {})[kobs.sample] = k.sched.run_ns + k.sched.wait_ns
    out: list[tuple[int, float, bool, float | None]] = []
    for pid, _ in hops:
        by = seen.get(pid, {})
        if len(by) < 2:
            continue
        ns = sched.get(pid, {})
        wanted = (ns[max(ns)] - ns[min(ns)]) / 1e9 if len(ns) >= 2 else None
        out.append(
            (pid, by[max(by)][0] - by[min(by)][0], by[max(by)][1] and by[min(by)][1], wanted)
        )
    return tuple(out)


def _scan_node(analysed: Analysed) -> str | None:
    assert analysed.snapshot is not None
    nodes = [obs.node_ip for obs in analysed.snapshot.facts(PROCESSES)]
    return nodes[0] if nodes else None


_RUN = """
import json, sys
from pathlib import Path
from slime_hangdoctor.collect.options import CollectOptions
from slime_hangdoctor.watchdog.run import CheckOptions, run_check
state, prom = Path(sys.argv[1]), Path(sys.argv[2])
opts = CollectOptions(local=True, window_s=0.3, timeout_s=20.0, logs=False)
result = run_check(None, opts, CheckOptions(state_file=state, prom_file=prom))
loaded = sorted(m for m in sys.modules if m.startswith(("slime_hangdoctor", "urllib3", "ray")))
print(json.dumps({"verdict": result.diagnosis.verdict.to_json(), "exit": int(result.exit_code),
                  "modules": loaded}))
"""


def _run_check(state: Path, prom: Path) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", _RUN, str(state), str(prom)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    parsed: dict[str, object] = json.loads(out.stdout)
    return parsed


def test_a_run_with_a_fresh_plan_reads_the_counters_and_imports_nothing_else(
    engines: list[_Engine], child: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    """`run_check` in a fresh interpreter, its state holding a plan: the verdict comes from the
    counters alone, and neither the collector, the analysis, Ray nor urllib3 is imported."""
    a = _engine(engines, "busy", "after")
    state, prom = tmp_path / "hd" / "state.json", tmp_path / "hd.prom"
    plan = CounterPlan(time.time() - 30, "", (a.url,), ((child.pid, _started(child.pid)),))
    save_state(state, WatchState(last_progress_at=1.0, last_run_at=1.0, counter_plan=plan))
    ran = _run_check(state, prom)
    verdict = ran["verdict"]
    assert isinstance(verdict, dict) and ran["exit"] == 0
    assert verdict["status"] == "progressing" and "counter_look" in verdict["extra"]
    modules = ran["modules"]
    assert isinstance(modules, list)
    for heavy in ("slime_hangdoctor.analysis", "slime_hangdoctor.collect.run", "urllib3", "ray"):
        assert not any(m == heavy or m.startswith(heavy + ".") for m in modules), heavy
    after = load_state(state).state
    assert (
        after.counter_plan == plan
    )  # kept as it was: the analysed look returns REFRESH_S after it
    assert after.last_progress_at is not None and after.last_progress_at > time.time() - 60
    assert f"sglang:{a.url}:decode_tokens_total" in after.markers
    text = prom.read_text()
    assert 'slime_hangdoctor_probe_outcomes{outcome="ok",source="sglang"} 2.0' in text
    assert 'slime_hangdoctor_status{status="progressing"} 1.0' in text


def test_a_flat_counter_sends_the_run_to_the_analysed_look(
    engines: list[_Engine], tmp_path: Path
) -> None:
    a = _engine(engines, "stuck", "stuck")
    state, prom = tmp_path / "hd" / "state.json", tmp_path / "hd.prom"
    save_state(state, WatchState(counter_plan=CounterPlan(time.time() - 30, "", (a.url,), ())))
    ran = _run_check(state, prom)
    verdict = ran["verdict"]
    assert isinstance(verdict, dict) and "counter_look" not in verdict.get("extra", {})
    said = [f["message"] for f in verdict["findings"] if f["rule"] == "watchdog.counter_look"]
    assert said and "took the analysed look" in said[0], said
    # the window said is the one read (start of the first reads to start of the last): at least
    # the 0.3 s asked, more when a loaded machine is slow to make the first reads
    flat = re.search(rf"flat for (\d+\.\d+) s at {re.escape(a.url)}", said[0])
    assert flat is not None and float(flat.group(1)) >= 0.3, said[0]
    modules = ran["modules"]
    assert isinstance(modules, list) and "slime_hangdoctor.analysis.diagnosis" in modules
