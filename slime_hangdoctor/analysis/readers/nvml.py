"""Per-GPU state from the NVML series (and GPM where present): idle, busy, stuck in a collective.

Measured on H200 (gpu-signatures.md): a GPU whose NCCL kernel waits for a peer that never comes shows
util.gpu 100 with util.memory ~0, flat NVLink counters, low power, GPM DRAM/tensor 0. A busy GPU has
memory traffic (util.memory, GPM DRAM) or rising NVLink counters or tensor activity. Idle is ~0 / 0.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from statistics import median

from slime_hangdoctor.analysis.source import Source
from slime_hangdoctor.facts import GpuReading
from slime_hangdoctor.parsers.nvml import GPM_SPEC as GPM
from slime_hangdoctor.parsers.nvml import GPU_SERIES, GpmReading
from slime_hangdoctor.snapshot import Snapshot

NVML = Source("nvml")  # GPU readings (NVML, or Ray's node summary)

STUCK_MIN_UTIL = 90  # util.gpu in every reading
STUCK_MAX_MEM = 1  # util.memory in every reading
IDLE_MAX_UTIL = 5
BUSY_MIN_UTIL = 20
BUSY_MIN_MEM = 5
NVLINK_MOVING = 1024  # counter units (KiB) over the series: above this the links carried data
GPM_BUSY = 2.0  # percent DRAM bandwidth / tensor activity that means real work
GPM_NVLINK_BUSY = 1000.0


class GpuState(str, Enum):
    IDLE = "idle"
    BUSY = "busy"
    STUCK = "stuck_in_collective"
    UNKNOWN = "unknown"

    @property
    def words(self) -> str:
        """The state in words for prose and process tables (the value stays the JSON's)."""
        return _GPU_STATE_WORDS[self]


# The one table of GPU state words (`extra.gpus[].state` keeps the values, `kernel_spin` included).
_GPU_STATE_WORDS: dict[GpuState, str] = {
    GpuState.IDLE: "idle",
    GpuState.BUSY: "busy",
    GpuState.STUCK: "stuck in a collective",
    GpuState.UNKNOWN: "state unknown",
}
SPINNING_WORDS = (
    "spinning in a kernel"  # a GPU read busy whose kernel makes no progress (cuda_spin)
)


@dataclass(frozen=True)
class GpuRead:
    node_ip: str | None
    index: int
    state: GpuState
    readings: int
    util_gpu: float | None  # median over the readings
    util_mem: float | None
    power_w: float | None
    nvlink_delta: int | None  # max-min of the TX+RX counters over the readings; None: not read
    span_s: float
    pids: tuple[tuple[int, int | None], ...]  # (pid, used memory bytes), most memory first
    gpm: GpmReading | None = None

    @property
    def label(self) -> str:
        return f"GPU {self.index}" + (f" @{self.node_ip}" if self.node_ip else "")

    def brief(self) -> str:
        """`busy (util 97% / memory util 35%, 275 W)`."""
        parts = []
        if self.util_gpu is not None:
            parts.append(f"util {self.util_gpu:.0f}% / memory util {self.util_mem or 0:.0f}%")
        if self.nvlink_delta is not None and self.nvlink_delta > NVLINK_MOVING:
            parts.append("NVLink moving")
        if self.power_w is not None:
            parts.append(f"{self.power_w:.0f} W")
        return f"{self.state.words} ({', '.join(parts)})" if parts else self.state.words

    def evidence(self, label: bool = True) -> str:
        parts = [f"{self.label}: {self.state.words}" if label else self.state.words]
        if self.util_gpu is not None:
            parts.append(
                f"util {self.util_gpu:.0f}% / memory util {self.util_mem or 0:.0f}% "
                f"over {self.readings} reading{'s' if self.readings != 1 else ''}"
                + (f" ({self.span_s:.1f} s)" if self.span_s > 0 else "")
            )
        if self.nvlink_delta is not None:
            parts.append(
                "NVLink counters flat"
                if self.nvlink_delta <= NVLINK_MOVING
                else f"NVLink counters +{self.nvlink_delta}"
            )
        if self.power_w is not None:
            parts.append(f"{self.power_w:.0f} W")
        if self.gpm is not None and self.gpm.supported and self.gpm.metrics:
            m = self.gpm.metrics
            parts.append(
                "GPM "
                + ", ".join(
                    f"{k} {m[k]:g}"
                    for k in ("SM_UTIL", "DRAM_BW_UTIL", "ANY_TENSOR_UTIL", "NVLINK_TOTAL_TX")
                    if k in m
                )
            )
        if self.pids:
            parts.append("pids " + ",".join(str(p) for p, _ in self.pids))
        return "; ".join(parts)


def _values(readings: Iterable[GpuReading], attr: str) -> list[float]:
    out: list[float] = []
    for r in readings:
        v = getattr(r, attr)
        if v is not None:
            out.append(float(v))
    return out


def _counter_delta(readings: list[GpuReading]) -> int | None:
    total = 0
    seen = False
    for attr in ("nvlink_tx", "nvlink_rx"):
        vals = [int(v) for v in _values(readings, attr)]
        if len(vals) >= 2:
            seen = True
            total += max(vals) - min(vals)
    return total if seen else None


def _gpm_busy(gpm: GpmReading | None) -> bool | None:
    """True: GPM shows real work; False: GPM shows none; None: no usable GPM."""
    if gpm is None or not gpm.supported or not gpm.metrics:
        return None
    m = gpm.metrics
    return (
        m.get("DRAM_BW_UTIL", 0.0) >= GPM_BUSY
        or m.get("ANY_TENSOR_UTIL", 0.0) >= GPM_BUSY
        or m.get("NVLINK_TOTAL_TX", 0.0) >= GPM_NVLINK_BUSY
    )


def classify(
    readings: list[GpuReading], nvlink_delta: int | None, gpm: GpmReading | None
) -> GpuState:
    ug = _values(readings, "util_gpu")
    um = _values(readings, "util_mem")
    gpm_busy = _gpm_busy(gpm)
    moving = nvlink_delta is not None and nvlink_delta > NVLINK_MOVING
    if not ug:
        if gpm_busy is True:
            return GpuState.BUSY
        return GpuState.UNKNOWN
    mem_max = max(um) if um else None
    if (
        min(ug) >= STUCK_MIN_UTIL
        and mem_max is not None
        and mem_max <= STUCK_MAX_MEM
        and not moving
        and gpm_busy is not True
    ):
        return GpuState.STUCK
    if moving or gpm_busy is True:
        return GpuState.BUSY
    if median(ug) >= BUSY_MIN_UTIL and (mem_max is None or median(um) >= BUSY_MIN_MEM):
        return GpuState.BUSY
    if max(ug) <= IDLE_MAX_UTIL and (mem_max is None or mem_max <= IDLE_MAX_UTIL):
        return GpuState.IDLE
    if median(ug) >= BUSY_MIN_UTIL:
        return GpuState.BUSY
    return GpuState.UNKNOWN


def _pids(readings: list[GpuReading]) -> tuple[tuple[int, int | None], ...]:
    mem: dict[int, int | None] = {}
    for r in readings:
        for pid, used in r.processes:
            prev = mem.get(pid)
            mem[pid] = max(prev or 0, used or 0) if (prev is not None or used is not None) else None
        for pu in r.process_util:
            mem.setdefault(pu.pid, None)
    return tuple(sorted(mem.items(), key=lambda kv: -(kv[1] or 0)))


def read_gpus(snapshot: Snapshot) -> tuple[GpuRead, ...]:
    """One GpuRead per (node, GPU index), over every NVML series of that node."""
    per: dict[tuple[str | None, int], list[GpuReading]] = {}
    spans: dict[tuple[str | None, int], list[float]] = {}
    for obs in snapshot.joined(GPU_SERIES):
        for sample in obs.series.samples:
            for r in sample.gpus:
                key = (obs.node_ip, r.index)
                per.setdefault(key, []).append(r)
                spans.setdefault(key, []).append(sample.t)
    gpm: dict[tuple[str | None, int], GpmReading] = {}
    for gobs in snapshot.facts(GPM):
        for g in gobs.fact:
            gpm[(gobs.node_ip, g.index)] = g
    out: list[GpuRead] = []
    for key in sorted(set(per) | set(gpm), key=lambda k: (k[0] or "", k[1])):
        readings = per.get(key, [])
        delta = _counter_delta(readings)
        ts = spans.get(key, [])
        power = _values(readings, "power_w")
        ug = _values(readings, "util_gpu")
        um = _values(readings, "util_mem")
        out.append(
            GpuRead(
                node_ip=key[0],
                index=key[1],
                state=classify(readings, delta, gpm.get(key)),
                readings=len(readings),
                util_gpu=median(ug) if ug else None,
                util_mem=median(um) if um else None,
                power_w=median(power) if power else None,
                nvlink_delta=delta,
                span_s=(max(ts) - min(ts)) if ts else 0.0,
                pids=_pids(readings),
                gpm=gpm.get(key),
            )
        )
    return tuple(out)


def gpu_of_pid(gpus: tuple[GpuRead, ...], pid: int, node_ip: str | None) -> GpuRead | None:
    """The GPU where `pid` holds the most memory (a process may hold a small context elsewhere)."""
    best: tuple[int, GpuRead] | None = None
    for g in gpus:
        if node_ip is not None and g.node_ip not in (None, node_ip):
            continue
        for p, used in g.pids:
            if p == pid and (best is None or (used or 0) > best[0]):
                best = (used or 0, g)
    return best[1] if best else None


def gpu_by_index(gpus: tuple[GpuRead, ...], index: int, node_ip: str | None) -> GpuRead | None:
    for g in gpus:
        if g.index == index and (node_ip is None or g.node_ip in (None, node_ip)):
            return g
    return None
