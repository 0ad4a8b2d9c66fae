"""Constructed facts around recorded stacks for the analysis tests: HTTP answers, topologies,
snapshots, and the containers (`procs_obs`) that place recorded process rows at a sample.

These build the contract dataclasses directly (facts.py / snapshot.py / topology.py). No stack is
written here, nor a process row or a kernel reading (recorded_shapes.py and the recordings under
tests/fixtures give them): `stack_obs` only places threads that a real process produced (tests/unit/
recorded_stacks.py, recorded_shapes.py) at a test's pid, sample and node.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from slime_hangdoctor.bundle import Manifest
from slime_hangdoctor.outcome import Outcome
from slime_hangdoctor.parsers import logs, nvml, pyspy, ray_state, sglang
from slime_hangdoctor.parsers.processes import ProcessInfo
from slime_hangdoctor.parsers.pyspy import ProcessStack, StackObs, ThreadStack
from slime_hangdoctor.parsers.ray_state import RayActor, RayJob, TaskPage
from slime_hangdoctor.parsers.sglang import HttpAnswer, HttpObs, HttpPeer, Parsed
from slime_hangdoctor.snapshot import Snapshot
from slime_hangdoctor.source_spec import Observed
from slime_hangdoctor.topology import Engine, Member, MemberKind, Topology
from slime_hangdoctor.verdict import Role

NODE = "10.0.0.1"


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
    answer = HttpAnswer(url, path, status, 0.05, outcome, error)
    return HttpObs(HttpPeer(kind), sample, answer, parsed)


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
        role,
        pid,
        NODE,
        MemberKind(kind),
        title,
        actor_id,
        cls,
        method,
        rank,
        url,
        source="ray-state",
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
    """A Snapshot of the facts a test gives, filed as the loader files them: each source's facts
    as `Observed` of its spec (the Ray state as its answers, the stacks as their dumps)."""
    ray_seen = kw.pop("ray_seen", True)
    observed = list(kw.pop("observed", ()))
    for key in _OBSERVED_KEYS:
        observed.extend(kw.pop(key, ()))
    observed += _ray_answers(kw, ray_seen)
    for s in kw.pop("stacks", ()):
        spec = pyspy.TRACEBACK_SPEC if s.via is pyspy.StackVia.DASHBOARD else pyspy.SPEC
        observed.append(Observed(spec.name, s.node_ip, s.sample, (s.stack,)))
    for h in kw.pop("http", ()):
        spec = sglang.ROUTER_SPEC if h.kind is sglang.HttpPeer.ROUTER else sglang.ENGINE_SPEC
        observed.append(Observed(spec.name, None, h.sample, h))
    for g in kw.pop("gpus", ()):
        observed.append(Observed(nvml.SPEC.name, g.node_ip, 0, g.series))
    observed += [Observed(logs.SPEC.name, log.node_ip, 0, log) for log in kw.pop("logs", ())]
    assert not kw, f"unknown sources: {sorted(kw)}"
    return Snapshot(manifest=manifest(samples=samples), observed=tuple(observed))


_ENDPOINTS = {e.target: e for e in (*ray_state.STATE_ENDPOINTS, ray_state.TASK_HISTORY)}


def _answer(target: str, rows: Sequence[Any], sample: int = 0, at: float = 0.0) -> Observed[Any]:
    endpoint = _ENDPOINTS[target if target in _ENDPOINTS else ray_state.TASK_HISTORY.target]
    answer = ray_state.StateAnswer(target, endpoint, tuple(rows))
    return Observed(ray_state.SPEC.name, None, sample, answer, at)


def _ray_answers(kw: dict[str, Any], seen: bool) -> list[Observed[Any]]:
    """The Ray state a test gives, as the dashboard answers the loader would have filed."""
    out: list[Observed[Any]] = []
    actors = kw.pop("actors", ())
    if actors or seen:
        out.append(_answer("actors", actors))
    for target, key in (
        ("tasks_running", "tasks"),
        ("nodes", "nodes"),
        ("jobs", "jobs"),
        ("placement_groups", "placement_groups"),
    ):
        if key in kw:
            out.append(_answer(target, kw.pop(key)))
    if (cluster := kw.pop("cluster", None)) is not None:
        out.append(_answer("cluster_status", (cluster,)))
    if "object_stores" in kw:
        out.append(_answer("node_summary", kw.pop("object_stores")))
    for page in kw.pop("task_pages", ()):
        rows = (TaskPage(page.tasks, num_filtered=len(page.tasks) + int(page.truncated)),)
        out.append(_answer(page.target, rows, page.sample, page.time))
    return out


def running_job(driver_pid: int = 100) -> RayJob:
    return RayJob("01000000", "raysubmit_1", "RUNNING", "python3 train.py", driver_pid, NODE)


def actor(actor_id: str, cls: str, pid: int, state: str = "ALIVE") -> RayActor:
    return RayActor(actor_id, cls, state, pid, "node1", job_id="01000000", node_ip=NODE)


def topology(*members: Member, engines: Sequence[Engine] = ()) -> Topology:
    return Topology(tuple(members), tuple(engines), (), True)
