"""Constructed facts for the analysis tests: stacks, processes, HTTP answers, snapshots.

These build the contract dataclasses directly (facts.py / snapshot.py / topology.py), with frame
names and files exactly as shared/reference/slime.md and sglang.md give them for each stage. They
test pure logic; the real captures are used through the parsers in the other analysis tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from slime_hangdoctor.bundle import Manifest
from slime_hangdoctor.facts import (
    Frame,
    HttpAnswer,
    Outcome,
    ProcessInfo,
    ProcessStack,
    RayActor,
    RayJob,
    ThreadStack,
)
from slime_hangdoctor.snapshot import HttpObs, Parsed, Snapshot, StackObs
from slime_hangdoctor.source_spec import Observed
from slime_hangdoctor.topology import Engine, Member, Topology
from slime_hangdoctor.verdict import Role

NODE = "10.0.0.1"
_STDLIB = {
    "threading.py",
    "selectors.py",
    "queue.py",
    "socket.py",
    "ssl.py",
    "subprocess.py",
    "contextlib.py",
    "functools.py",
}


def F(name: str, file: str, line: int = 10) -> Frame:  # noqa: N802 - reads like a stack line
    """One Python frame; `file` is the short path py-spy prints."""
    if file.startswith("slime/") or file in ("train.py", "train_async.py"):
        full = f"/root/slime/{file}"
    elif file in _STDLIB or file.startswith(
        ("asyncio/", "concurrent/", "http/", "multiprocessing/")
    ):
        full = f"/usr/lib/python3.12/{file}"
    else:
        full = f"/usr/local/lib/python3.12/dist-packages/{file}"
    return Frame(name=name, filename=full, line=line, short_filename=file)


def N(name: str, lib: str = "libc.so.6") -> Frame:  # noqa: N802
    """One native frame (py-spy --native)."""
    return Frame(name=name, filename=lib, native=True)


RAY_ACTOR_TAIL = (
    F(
        "_inject_tracing_into_class.<locals>.span_wrapper.<locals>._resume_span",
        "ray/util/tracing/tracing_helper.py",
        487,
    ),
    F(
        "FunctionActorManager._make_actor_method_executor.<locals>.actor_method_executor",
        "ray/_private/function_manager.py",
        740,
    ),
    F("Worker.main_loop", "ray/_private/worker.py", 1069),
    F("<module>", "ray/_private/workers/default_worker.py", 323),
)
RAY_GET = (
    F("Worker.get_objects", "ray/_private/worker.py", 1007),
    F("get", "ray/_private/worker.py", 3009),
    F(
        "client_mode_hook.<locals>.decorator.<locals>.wrapper",
        "ray/_private/client_mode_hook.py",
        134,
    ),
)
IDLE_ACTOR = (
    F("Worker.main_loop", "ray/_private/worker.py", 1069),
    F("<module>", "ray/_private/workers/default_worker.py", 323),
)
GC_THREAD = (
    F("Condition.wait", "threading.py", 355),
    F("Event.wait", "threading.py", 655),
    F("PythonGCThread.run", "ray/_private/gc_collect_manager.py", 29),
)


def thread(
    frames: Sequence[Frame], *, name: str = "MainThread", active: bool = False, tid: int = 1
) -> ThreadStack:
    return ThreadStack(tid, name, active, False, tuple(frames), tid)


def actor_main(*frames: Frame, active: bool = False) -> ThreadStack:
    """The main thread of a Ray actor running a method: the method frames, then Ray's."""
    return thread((*frames, *RAY_ACTOR_TAIL), active=active)


def stack_obs(pid: int, *threads: ThreadStack, sample: int = 0, node: str = NODE) -> StackObs:
    ts = tuple(
        ThreadStack(
            pid if t.name == "MainThread" else t.thread_id,
            t.name,
            t.active,
            t.owns_gil,
            t.frames,
            pid if t.name == "MainThread" else t.os_thread_id,
        )
        for t in threads
    )
    return StackObs(node, pid, sample, ProcessStack(pid, ts))


def proc(pid: int, title: str, cpu: float | None = None, **kw: Any) -> ProcessInfo:
    return ProcessInfo(
        pid=pid,
        ppid=kw.pop("ppid", None),
        name=title.split(" ", maxsplit=1)[0][:15],
        cmdline=tuple(title.split(" ")),
        status=kw.pop("status", "sleeping"),
        cpu_seconds=cpu,
        node_ip=NODE,
        **kw,
    )


def procs_obs(sample: int, *infos: ProcessInfo) -> Observed[tuple[ProcessInfo, ...]]:
    return Observed("processes", NODE, sample, tuple(infos), 1000.0 + 10 * sample)


def http(
    url: str,
    path: str,
    status: int | None,
    parsed: Parsed = None,
    *,
    sample: int = 0,
    error: str | None = None,
    kind: str = "engine",
    outcome: Outcome | None = None,
) -> HttpObs:
    """One HTTP answer as the loader makes it; `outcome` defaults to what the collector records
    for an answer with that status (an answer without one must say how it ended)."""
    if outcome is None:
        assert status is not None, "an answer without a status needs its outcome"
        outcome = Outcome.OK if 200 <= status < 300 else Outcome.FAILED
    return HttpObs(kind, sample, HttpAnswer(url, path, status, 0.05, outcome, error), parsed)


def member(
    role: Role,
    pid: int,
    kind: str = "actor",
    *,
    cls: str | None = None,
    method: str | None = None,
    rank: int | None = None,
    url: str | None = None,
    actor_id: str | None = None,
) -> Member:
    title = f"ray::{cls}.{method}" if cls and method else (f"ray::{cls}" if cls else "")
    return Member(
        role, pid, NODE, kind, title, actor_id, cls, method, rank, url, source="ray-state"
    )


def manifest(window_s: float = 10.0, samples: int = 2) -> Manifest:
    return Manifest(
        schema="slime-hangdoctor.bundle/1",
        tool_version="test",
        created_at=2000.0,
        command="attach",
        hosts=(NODE,),
        window_s=window_s if samples > 1 else 0.0,
        sample_times=tuple(1000.0 + 10 * s for s in range(samples)),
        probes=(),
    )


# The sources a test gives by name (each a tuple of `Observed` facts, which carry their source):
# the builder files them all in the Snapshot's `observed`, as the loader does.
_OBSERVED_KEYS = ("processes", "ras", "flight", "kernel", "sockets", "gpm", "log_heads")


def snapshot(samples: int = 2, **kw: Any) -> Snapshot:
    kw.setdefault("ray_seen", True)
    observed = list(kw.pop("observed", ()))
    for key in _OBSERVED_KEYS:
        observed.extend(kw.pop(key, ()))
    return Snapshot(manifest=manifest(samples=samples), observed=tuple(observed), **kw)


def running_job(driver_pid: int = 100) -> RayJob:
    return RayJob("01000000", "raysubmit_1", "RUNNING", "python3 train.py", driver_pid, NODE)


def actor(actor_id: str, cls: str, pid: int, state: str = "ALIVE") -> RayActor:
    return RayActor(actor_id, cls, state, pid, "node1", job_id="01000000", node_ip=NODE)


def topology(*members: Member, engines: Sequence[Engine] = ()) -> Topology:
    return Topology(tuple(members), tuple(engines), (), True)


# RolloutManager main thread in `generate` (slime.md §3) and its asyncio loop thread, idle.
RM_GENERATE_FRAMES = (
    F("Condition.wait", "threading.py", 355),
    F("Future.result", "concurrent/futures/_base.py", 451),
    F("AsyncLoopThread.run", "slime/utils/async_utils.py", 23),
    F("run", "slime/utils/async_utils.py", 36),
    F("generate_rollout", "slime/rollout/sglang_rollout.py", 560),
    F("call_rollout_fn", "slime/rollout/base_types.py", 20),
    F("RolloutManager._get_rollout_data", "slime/ray/rollout.py", 220),
    F("RolloutManager.generate", "slime/ray/rollout.py", 135),
)
LOOP_FRAMES = (
    F("EpollSelector.select", "selectors.py", 468),
    F("BaseEventLoop._run_once", "asyncio/base_events.py", 1898),
    F("BaseEventLoop.run_forever", "asyncio/base_events.py", 608),
    F("AsyncLoopThread._start_loop", "slime/utils/async_utils.py", 16),
    F("Thread.run", "threading.py", 982),
)
