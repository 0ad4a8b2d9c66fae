"""Did the job advance between the two samples? Every signal of work, and the one rule that says
which of them are the job's progress (docs/verdict.md, "Progress is the job's").

Progress is the job's: a weight version moved, storage bytes moved by a process that waits on I/O
(analysis/kernel.py: slow, not stuck), NCCL RAS collective counts rose, a GPU did real work, a
process moved to another stage, a process computed in changing code (weak). An engine's token and
request counters (and the GPU work of its processes) count only while the job's requests are
answered: when a hop of the request path holds them (analysis/request_path.py: CPU-bound in the
same frame at both samples while requests pile up at it), what the engines still decode is not the
job's progress: those signals are kept as `not_counted`, with why, and the hop is the culprit.
Activity that is NOT progress: CPU burnt at a CUDA sync point (a stuck NCCL wait spins a core),
health checks and metrics answers (#1058: endless `GET /health 200` while hung), a stack that
changed line inside the same wait.
"""

from __future__ import annotations

from dataclasses import dataclass

from slime_hangdoctor.analysis.engines import EngineRead
from slime_hangdoctor.analysis.gpu import GpuState
from slime_hangdoctor.analysis.request_path import Hold, hold_text, holds
from slime_hangdoctor.analysis.signatures import Block
from slime_hangdoctor.analysis.source import Source
from slime_hangdoctor.analysis.world import Proc, World
from slime_hangdoctor.facts import RasReport
from slime_hangdoctor.parsers.nccl_ras import SPEC as RAS
from slime_hangdoctor.verdict import Role, Stage

CPU_BUSY_FRACTION = 0.3  # of one core over the window


@dataclass(frozen=True)
class Signal:
    source: Source  # sglang | nvml | gpm | ras | stacks | cpu
    subject: str
    message: str

    def text(self) -> str:
        return f"{self.subject}: {self.message}"


@dataclass(frozen=True)
class Progress:
    progress: tuple[Signal, ...]
    activity: tuple[Signal, ...]
    frozen: tuple[Signal, ...]  # compared across samples (or over the GPU series) and unchanged
    compared: tuple[str, ...]  # sources that had two samples to compare
    # work that moved but is not the job's progress (an engine's tokens while a hop of the request
    # path holds the job's requests), each with why; and those hops
    not_counted: tuple[Signal, ...] = ()
    held: tuple[Hold, ...] = ()
    # the engines' tokens counted without the request path seen from the sockets (a hop that holds
    # the job's requests could not show): the progress finding says so
    path_unchecked: bool = False

    @property
    def moving(self) -> bool:
        return bool(self.progress)


def window_s(world: World) -> float:
    w = world.snapshot.window_s
    times = world.snapshot.manifest.sample_times
    if w <= 0 and len(times) >= 2:
        w = max(times) - min(times)
    return w


def _engine_signals(
    engines: tuple[EngineRead, ...],
) -> tuple[list[Signal], list[Signal], list[Signal], bool]:
    """(the engines' tokens: the job's progress only while its requests are answered, the weight
    versions that moved: the job's own, frozen, compared)"""
    tokens: list[Signal] = []
    progress: list[Signal] = []
    frozen: list[Signal] = []
    compared = False
    for e in engines:
        subject = f"engine {e.url}"
        if e.moving:
            tokens.append(Signal("sglang", subject, ", ".join(e.moving[:3])))
            compared = True
        if len(set(e.weight_versions)) > 1:
            progress.append(
                Signal("sglang", subject, "weight_version " + " -> ".join(e.weight_versions))
            )
        if e.frozen:
            compared = True
            if (e.in_flight or 0) > 0:
                frozen.append(
                    Signal(
                        "sglang", subject, f"{e.in_flight:g} requests in flight, counters unchanged"
                    )
                )
    return tokens, progress, frozen, compared


def _gpu_signals(world: World) -> tuple[list[Signal], list[Signal]]:
    """Busy GPUs that run the job's processes (all busy GPUs when no pid maps to the job): (those
    of the engines' processes: decoding, as their tokens; the others)."""
    job = {p.pid for p in world.procs if p.role is not None}
    engine = {p.pid for p in world.procs if p.role is Role.SGLANG_ENGINE}
    mapped = [g for g in world.gpus if any(pid in job for pid, _ in g.pids)]
    pool = mapped if mapped else [g for g in world.gpus if not job or not g.pids]
    busy = [g for g in pool if g.state is GpuState.BUSY]
    decoding = [g for g in busy if g.pids and all(pid in engine for pid, _ in g.pids)]
    return (
        [Signal("nvml", g.label, g.brief()) for g in decoding],
        [Signal("nvml", g.label, g.brief()) for g in busy if g not in decoding],
    )


def _ras_totals(report: RasReport) -> dict[str, int]:
    return {
        c.hash: sum(sum(r.collective_counts.values()) for r in c.ranks)
        for c in report.communicators
    }


def _ras_signals(world: World) -> tuple[list[Signal], list[Signal], bool]:
    progress: list[Signal] = []
    frozen: list[Signal] = []
    per_node: dict[str | None, list[tuple[int, RasReport]]] = {}
    for obs in world.snapshot.facts(RAS):
        per_node.setdefault(obs.node_ip, []).append((obs.sample, obs.fact))
    compared = False
    for node, reports in per_node.items():
        if len({s for s, _ in reports}) < 2:
            continue
        reports.sort(key=lambda sr: sr[0])
        first, last = _ras_totals(reports[0][1]), _ras_totals(reports[-1][1])
        for h in sorted(set(first) & set(last)):
            compared = True
            subject = f"NCCL communicator {h}" + (f" @{node}" if node else "")
            if last[h] > first[h]:
                progress.append(
                    Signal("ras", subject, f"collectives launched +{last[h] - first[h]}")
                )
            else:
                frozen.append(Signal("ras", subject, "collective counts unchanged"))
    return progress, frozen, compared


def _stack_signals(procs: tuple[Proc, ...]) -> tuple[list[Signal], list[Signal], list[Signal]]:
    progress: list[Signal] = []
    activity: list[Signal] = []
    frozen: list[Signal] = []
    for p in procs:
        first, last = p.first, p.latest
        if first is None or last is None or first.sample == last.sample:
            continue
        if first.stage is not None and last.stage is not None and first.stage != last.stage:
            progress.append(
                Signal("stacks", p.label, f"moved from {first.stage.value} to {last.stage.value}")
            )
        elif first.primary.key() != last.primary.key():
            activity.append(Signal("stacks", p.label, "stack changed within the same stage"))
        elif last.block is not Block.IDLE_WORKER:
            frozen.append(Signal("stacks", p.label, "identical stack in both samples"))
    return progress, activity, frozen


def _cpu_signals(procs: tuple[Proc, ...], window: float) -> tuple[list[Signal], list[Signal]]:
    progress: list[Signal] = []
    activity: list[Signal] = []
    for p in procs:
        delta = p.cpu_delta
        if delta is None or window <= 0 or delta < CPU_BUSY_FRACTION * window:
            continue
        msg = f"{delta:.1f} CPU-seconds in {window:.0f} s"
        first, last = p.first, p.latest
        computing = (
            last is not None
            and last.primary.block is Block.CPU
            and last.stage is not Stage.REWARD
            and first is not None
            and first.sample != last.sample
            and first.primary.calls() != last.primary.calls()
        )
        if computing and last is not None:
            progress.append(Signal("cpu", p.label, f"computing ({msg}), call chain moving"))
        else:
            spin = last is not None and last.primary.block is Block.CUDA_SYNC
            activity.append(
                Signal("cpu", p.label, msg + (" spinning at a CUDA sync" if spin else ""))
            )
    return progress, activity


def assess(world: World, engines: tuple[EngineRead, ...]) -> Progress:
    """Every signal of work, and the rule (module doc): what the engines decode counts only while
    no hop of the request path holds the job's requests."""
    progress: list[Signal] = []
    activity: list[Signal] = []
    frozen: list[Signal] = []
    compared: list[str] = []
    tokens, e_prog, e_frozen, e_cmp = _engine_signals(engines)
    progress += e_prog
    frozen += e_frozen
    if e_cmp:
        compared.append("sglang")
    decoding, g_prog = _gpu_signals(world)
    progress += g_prog
    held = holds(world, window_s(world))
    path_unchecked = bool(tokens) and not any(p.conns for p in world.procs)
    not_counted: list[Signal] = []
    if held:
        why = f"not the job's progress: {hold_text(held[0])}"
        not_counted = [
            Signal(s.source, s.subject, f"{s.message}; {why}") for s in tokens + decoding
        ]
    else:
        progress[:0] = tokens
        progress += decoding
    if any(g.readings >= 2 for g in world.gpus):
        compared.append("nvml")
    r_prog, r_frozen, r_cmp = _ras_signals(world)
    progress += r_prog
    frozen += r_frozen
    if r_cmp:
        compared.append("ras")
    s_prog, s_act, s_frozen = _stack_signals(world.procs)
    progress += s_prog
    activity += s_act
    frozen += s_frozen
    if s_prog or s_act or s_frozen:
        compared.append("stacks")
    c_prog, c_act = _cpu_signals(world.procs, window_s(world))
    progress += c_prog
    activity += c_act
    if any(p.cpu_delta is not None for p in world.procs):
        compared.append("cpu")
    return Progress(
        tuple(progress),
        tuple(activity),
        tuple(frozen),
        tuple(compared),
        tuple(not_counted),
        held,
        path_unchecked and not held,
    )
