"""Stand-in pynvml (nvidia-ml-py) for the reliability suite: a fake at the library boundary,
placed first on PYTHONPATH of the CLI subprocess. It mimics the part of pynvml's API that
slime_hangdoctor/collect/nvml.py calls, for a node with two GPUs where GPU 0 answers (idle, a
realistic H200 reading) and every query about GPU 1 raises NVMLError_GpuIsLost ("GPU is lost",
the error NVML gives after an Xid 79). No GPM API (as an old nvidia-ml-py).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

NVML_CLOCK_SM = 1
NVML_PCIE_UTIL_TX_BYTES = 0
NVML_PCIE_UTIL_RX_BYTES = 1
NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX = 138
NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 139


class NVMLError(Exception):
    """pynvml's base error: str() is NVML's error string."""

    _text = "Unknown Error"

    def __str__(self) -> str:
        return self._text


class NVMLError_GpuIsLost(NVMLError):  # noqa: N801 - pynvml's name
    _text = "GPU is lost"


class NVMLError_NotFound(NVMLError):  # noqa: N801 - pynvml's name
    _text = "Not Found"


_LOST = 1


def nvmlInit() -> None:  # noqa: N802 - pynvml's name
    return None


def nvmlShutdown() -> None:  # noqa: N802
    return None


def nvmlSystemGetDriverVersion() -> str:  # noqa: N802
    return "575.57.08"


def nvmlDeviceGetCount() -> int:  # noqa: N802
    return 2


def nvmlDeviceGetHandleByIndex(i: int) -> Any:  # noqa: N802
    return SimpleNamespace(index=i)


def _check(handle: Any) -> None:
    if handle.index == _LOST:
        raise NVMLError_GpuIsLost()


def nvmlDeviceGetUtilizationRates(handle: Any) -> Any:  # noqa: N802
    _check(handle)
    return SimpleNamespace(gpu=0, memory=0)


def nvmlDeviceGetPowerUsage(handle: Any) -> int:  # noqa: N802
    _check(handle)
    return 74_000


def nvmlDeviceGetClockInfo(handle: Any, clock: int) -> int:  # noqa: N802
    _check(handle)
    return 345


def nvmlDeviceGetPcieThroughput(handle: Any, counter: int) -> int:  # noqa: N802
    _check(handle)
    return 0


def nvmlDeviceGetFieldValues(handle: Any, fields: list[int]) -> list[Any]:  # noqa: N802
    _check(handle)
    return [SimpleNamespace(nvmlReturn=0, value=SimpleNamespace(ullVal=0)) for _ in fields]


def nvmlDeviceGetComputeRunningProcesses(handle: Any) -> list[Any]:  # noqa: N802
    _check(handle)
    return []


def nvmlDeviceGetProcessUtilization(handle: Any, last_ts: int) -> list[Any]:  # noqa: N802
    _check(handle)
    raise NVMLError_NotFound()


def nvmlDeviceGetCurrentClocksEventReasons(handle: Any) -> int:  # noqa: N802
    _check(handle)
    return 1
