"""Observed facts: what the parsers make of raw evidence. Frozen, I/O-free, no verdicts.

Every dataclass here describes something that was *seen* (a stack, a GPU reading, an HTTP answer).
Interpretation lives in `slime_hangdoctor.analysis`; capture lives in `slime_hangdoctor.collect`.
"""

from __future__ import annotations

from dataclasses import dataclass

# --------------------------------------------------------------------------- stacks (py-spy)


@dataclass(frozen=True)
class Frame:
    """One stack frame, innermost first in `ThreadStack.frames`."""

    name: str
    filename: str
    line: int | None = None
    short_filename: str = ""
    native: bool = False

    @property
    def where(self) -> str:
        """`function (short/file.py:line)`, as py-spy prints it."""
        loc = self.short_filename or self.filename
        return (
            f"{self.name} ({loc}:{self.line})" if self.line is not None else f"{self.name} ({loc})"
        )


# --------------------------------------------------------------------------- processes (/proc, psutil)


# --------------------------------------------------------------------------- GPUs (NVML, GPM)


@dataclass(frozen=True)
class GpuProcessUtil:
    pid: int
    sm_util: int
    mem_util: int


@dataclass(frozen=True)
class GpuReading:
    """One GPU at one instant. None where NVML did not answer that field."""

    index: int
    util_gpu: int | None
    util_mem: int | None
    power_w: float | None = None
    sm_mhz: int | None = None
    pcie_tx_kbs: int | None = None
    pcie_rx_kbs: int | None = None
    nvlink_tx: int | None = None  # cumulative counter (NVML field value)
    nvlink_rx: int | None = None
    processes: tuple[tuple[int, int | None], ...] = ()  # (pid, used memory bytes)
    process_util: tuple[GpuProcessUtil, ...] = ()
    uuid: str | None = None


@dataclass(frozen=True)
class GpuSample:
    t: float  # seconds since the first sample of the series
    gpus: tuple[GpuReading, ...]


@dataclass(frozen=True)
class GpuSeries:
    """A short time series of every GPU on one node."""

    samples: tuple[GpuSample, ...]
    driver: str | None = None
    node_ip: str | None = None


# --------------------------------------------------------------------------- NCCL RAS


# --------------------------------------------------------------------------- PyTorch flight recorder


# --------------------------------------------------------------------------- Ray state


# --------------------------------------------------------------------------- logs (Ray log API)


# --------------------------------------------------------------------------- TCP connections (procfs)


# --------------------------------------------------------------------------- kernel-side process state


# --------------------------------------------------------------------------- actor log heads (node files)
