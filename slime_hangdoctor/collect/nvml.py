"""GPU readings of this node through NVML (nvidia-ml-py): a short time series, and Hopper GPM metrics.

The artefacts have exactly the format of the real H200 fixtures (see
`shared/reproducers/nccl-broadcast-hang/sample.py` and `ras_gpm.py`):

- `nvml`: `{"driver", "samples": [{"t", "gpus": [{"i", "util": [gpu, mem], "power_w", "sm_mhz",
  "pcie_tx_kbs", "pcie_rx_kbs", "nvlink": [[ret, tx], [ret, rx]], "procs": [[pid, mem]],
  "proc_util": [[pid, sm, mem, ts]], "clk_reasons"}]}]}`. A field NVML refused is the string
  `"ERR <ExceptionType>: <message>"` instead of its value.
- `gpm`: `[{"i", "gpm_supported", "gpm": {"SM_UTIL", ...}, "util", "power_w"}]` (or `"error"`).

Deadlines are absolute `time.monotonic()` values. Nothing here raises: every path ends in a
`ProbeRecord`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from slime_hangdoctor.bundle import BundleWriter, ProbeClock, ProbeRecord, dumps_json
from slime_hangdoctor.outcome import Outcome
from slime_hangdoctor.parsers.nvml import GPM, NVML

TARGET = "gpus"
_NVLINK_FIELDS = ("NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX")
# name in the artefact -> pynvml constant (as ras_gpm.py asks for them)
_GPM_METRICS = (
    ("SM_UTIL", "NVML_GPM_METRIC_SM_UTIL"),
    ("SM_OCCUPANCY", "NVML_GPM_METRIC_SM_OCCUPANCY"),
    ("ANY_TENSOR_UTIL", "NVML_GPM_METRIC_ANY_TENSOR_UTIL"),
    ("DRAM_BW_UTIL", "NVML_GPM_METRIC_DRAM_BW_UTIL"),
    ("GRAPHICS_UTIL", "NVML_GPM_METRIC_GRAPHICS_UTIL"),
    ("NVLINK_TOTAL_TX", "NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC"),
)


def err_text(exc: BaseException) -> str:
    """How a refused field is written into the artefact (as the reproducer wrote it)."""
    return f"ERR {type(exc).__name__}: {exc}"


def safe_call(fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)`, or the error string when it raises."""
    try:
        return fn(*args)
    except Exception as exc:  # NVML raises many NVMLError_* kinds; any of them is a field value
        return err_text(exc)


# --------------------------------------------------------------------------- NVML session


class _NvmlUnavailable(Exception):
    def __init__(self, outcome: Outcome, reason: str) -> None:
        super().__init__(reason)
        self.outcome = outcome
        self.reason = reason


# The NVML and GPM readers open NVML at once, each in its thread. Where `import pynvml` fails in one
# thread, CPython hands the other thread, which found the module in sys.modules while the first
# import still ran, that half-made module (import's fast path returns the object it found before
# it waited for the import's lock): "no attribute 'nvmlInit'" instead of "not installed". One
# import at a time.
_IMPORT_LOCK = threading.Lock()


def _nvml_open() -> Any:
    """Import pynvml and nvmlInit(); raises _NvmlUnavailable with a clear reason."""
    try:
        with _IMPORT_LOCK:
            import pynvml
    except ImportError as exc:
        raise _NvmlUnavailable(
            Outcome.UNAVAILABLE, f"nvidia-ml-py (pynvml) is not installed: {exc}"
        ) from exc
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        raise _NvmlUnavailable(*_init_failure(pynvml, exc)) from exc
    return pynvml


def _init_failure(nvml: Any, exc: Exception) -> tuple[Outcome, str]:
    name = type(exc).__name__
    if name == "NVMLError_LibraryNotFound":
        return Outcome.UNAVAILABLE, (
            "NVML is not available on this node (libnvidia-ml.so not found: no NVIDIA driver); "
            f"{err_text(exc)}"
        )
    if name in ("NVMLError_DriverNotLoaded", "NVMLError_NoPermission"):
        outcome = Outcome.DENIED if name == "NVMLError_NoPermission" else Outcome.UNAVAILABLE
        return outcome, f"NVML could not start: {err_text(exc)}"
    return Outcome.FAILED, f"nvmlInit failed: {err_text(exc)}"


def _nvml_close(nvml: Any) -> None:
    try:
        nvml.nvmlShutdown()
    except Exception:
        pass


def _handles(nvml: Any) -> list[Any]:
    """One handle per GPU; a GPU NVML refused is its error string instead."""
    count = nvml.nvmlDeviceGetCount()
    return [safe_call(nvml.nvmlDeviceGetHandleByIndex, i) for i in range(count)]


# --------------------------------------------------------------------------- one reading


def read_gpu(
    nvml: Any,
    index: int,
    handle: Any,
    last_ts: dict[int, int],
    *,
    pcie: bool = True,
    proc_util: bool = True,
) -> dict[str, Any]:
    """One GPU's fields, in the fixture format. Every field NVML refuses becomes an error string.

    `handle` may itself be an error string (the GPU's handle was refused): then every field is
    that error. `last_ts` keeps the newest per-process utilisation timestamp per GPU. `pcie`:
    read PCIe throughput (NVML measures it over ~20 ms per direction: 42 of the 48 ms a reading
    takes on an H200, see docs/gpu.md), so the series reads it on its first sample only.
    `proc_util`: read the per-process utilisation samples (2.7 ms of CPU of the ~5 ms a reading
    costs on an H200); the series reads them at its first sample and once more at its end.
    """
    g: dict[str, Any] = {"i": index}
    if isinstance(handle, str):
        for key in ("util", "power_w", "sm_mhz", "pcie_tx_kbs", "pcie_rx_kbs", "nvlink"):
            g[key] = handle
        g.update(procs=handle, proc_util=handle, clk_reasons=handle)
        return g
    u = safe_call(nvml.nvmlDeviceGetUtilizationRates, handle)
    g["util"] = u if isinstance(u, str) else [u.gpu, u.memory]
    g["power_w"] = safe_call(lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000)
    g["sm_mhz"] = safe_call(nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_SM)
    if pcie:
        g["pcie_tx_kbs"] = safe_call(
            nvml.nvmlDeviceGetPcieThroughput, handle, nvml.NVML_PCIE_UTIL_TX_BYTES
        )
        g["pcie_rx_kbs"] = safe_call(
            nvml.nvmlDeviceGetPcieThroughput, handle, nvml.NVML_PCIE_UTIL_RX_BYTES
        )
    fields = [getattr(nvml, name, None) for name in _NVLINK_FIELDS]
    if all(f is not None for f in fields):
        fv = safe_call(nvml.nvmlDeviceGetFieldValues, handle, fields)
        g["nvlink"] = fv if isinstance(fv, str) else [[x.nvmlReturn, x.value.ullVal] for x in fv]
    procs = safe_call(nvml.nvmlDeviceGetComputeRunningProcesses, handle)
    g["procs"] = procs if isinstance(procs, str) else [[p.pid, p.usedGpuMemory] for p in procs]
    if proc_util:
        g["proc_util"] = read_proc_util(nvml, index, handle, last_ts)
    reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
    g["clk_reasons"] = safe_call(reasons, handle) if reasons is not None else None
    return g


def read_proc_util(nvml: Any, index: int, handle: Any, last_ts: dict[int, int]) -> Any:
    """Per-process utilisation samples since `last_ts[index]` (which it advances), or the error."""
    pu = safe_call(nvml.nvmlDeviceGetProcessUtilization, handle, last_ts.get(index, 0))
    if isinstance(pu, str):
        return pu
    if pu:
        last_ts[index] = max(p.timeStamp for p in pu)
    return [[p.pid, p.smUtil, p.memUtil, p.timeStamp] for p in pu]


def _errors_of(samples: list[dict[str, Any]]) -> list[str]:
    """`GPU i: <first error>` for every GPU that had a refused field in any sample."""
    seen: dict[int, str] = {}
    for s in samples:
        for g in s["gpus"]:
            for key, value in g.items():
                if isinstance(value, str) and value.startswith("ERR ") and g["i"] not in seen:
                    if key == "proc_util" and "NotFound" in value:
                        continue  # no process sample in the interval: normal on an idle GPU
                    seen[g["i"]] = f"GPU {g['i']} {key}: {value}"
    return [seen[i] for i in sorted(seen)]


# --------------------------------------------------------------------------- probes


def sample_gpus(
    writer: BundleWriter,
    *,
    node_ip: str | None,
    duration_s: float,
    interval_s: float,
    deadline: float,
    detail: bool = True,
) -> ProbeRecord:
    """Sample every GPU of this node every `interval_s` for `duration_s` (at least once).

    `deadline` is an absolute `time.monotonic()` value; sampling stops there. `detail=False`: no
    PCIe throughput and no per-process utilisation (CollectOptions.gpu_detail).
    """
    probe = ProbeClock(NVML, TARGET, node_ip)
    t0, record = probe.t0, probe.record

    try:
        nvml = _nvml_open()
    except _NvmlUnavailable as exc:
        return writer.add(record(exc.outcome, exc.reason))
    try:
        doc = _series(nvml, t0, min(t0 + max(duration_s, 0.0), deadline), interval_s, detail)
    except Exception as exc:  # device count / driver version refused: nothing to sample
        return writer.add(record(Outcome.FAILED, f"NVML refused the GPU list: {err_text(exc)}"))
    finally:
        _nvml_close(nvml)
    if not doc["samples"] or not doc["samples"][0]["gpus"]:
        return writer.add(record(Outcome.UNAVAILABLE, "NVML lists no GPU on this node"), None)
    errors = _errors_of(doc["samples"])
    reason = "; ".join(errors) if errors else None
    return writer.add(record(Outcome.OK, reason), dumps_json(doc), suffix=".json")


def _series(
    nvml: Any, t0: float, stop: float, interval_s: float, detail: bool = True
) -> dict[str, Any]:
    doc: dict[str, Any] = {"driver": safe_call(nvml.nvmlSystemGetDriverVersion), "samples": []}
    handles = _handles(nvml)
    last_ts: dict[int, int] = {}
    interval = max(interval_s, 0.05)
    while True:
        s = {"t": round(time.monotonic() - t0, 2), "gpus": []}
        first = not doc["samples"] and detail
        s["gpus"] = [
            read_gpu(nvml, i, h, last_ts, pcie=first, proc_util=first)
            for i, h in enumerate(handles)
        ]
        doc["samples"].append(s)
        now = time.monotonic()
        if now + interval > stop:
            break
        time.sleep(interval)
    if detail and len(doc["samples"]) > 1:  # process samples since the first reading, at the last
        for g, h in zip(doc["samples"][-1]["gpus"], handles, strict=True):
            if not isinstance(h, str):
                g["proc_util"] = read_proc_util(nvml, g["i"], h, last_ts)
    return doc


def sample_gpm(
    writer: BundleWriter, *, node_ip: str | None, duration_s: float, deadline: float
) -> ProbeRecord:
    """Hopper+ GPM metrics of every GPU over `duration_s` (one pair of GPM samples per GPU).

    Unlike ras_gpm.py (one second per GPU in turn), every GPU's first sample is taken, then one
    sleep, then every second sample: the probe takes `duration_s` whatever the number of GPUs.
    """
    record = ProbeClock(GPM, TARGET, node_ip).record

    try:
        nvml = _nvml_open()
    except _NvmlUnavailable as exc:
        return writer.add(record(exc.outcome, exc.reason))
    if not hasattr(nvml, "nvmlGpmSampleGet"):
        _nvml_close(nvml)
        return writer.add(record(Outcome.UNAVAILABLE, "this nvidia-ml-py has no GPM API"))
    try:
        handles = _handles(nvml)
        sleep = max(0.0, min(duration_s, deadline - time.monotonic()))
        readings = _gpm_readings(nvml, handles, sleep)
    except Exception as exc:
        return writer.add(record(Outcome.FAILED, f"NVML refused the GPU list: {err_text(exc)}"))
    finally:
        _nvml_close(nvml)
    if not readings:
        return writer.add(record(Outcome.UNAVAILABLE, "NVML lists no GPU on this node"))
    data = dumps_json(readings)
    if not any(r.get("gpm") for r in readings):
        why = "; ".join(str(r["error"]) for r in readings if "error" in r)
        reason = "GPM is not supported on these GPUs (it needs Hopper or newer)"
        return writer.add(
            record(Outcome.UNAVAILABLE, f"{reason}: {why}" if why else reason),
            data,
            suffix=".json",
        )
    errors = [f"GPU {r['i']}: {r['error']}" for r in readings if "error" in r]
    return writer.add(
        record(Outcome.OK, "; ".join(errors) or None),
        data,
        suffix=".json",
    )


def _gpm_readings(nvml: Any, handles: list[Any], sleep: float) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    pairs: dict[int, tuple[Any, Any]] = {}
    try:
        for i, h in enumerate(handles):
            r: dict[str, Any] = {"i": i}
            results.append(r)
            if isinstance(h, str):
                r["error"] = h
                continue
            try:
                r["gpm_supported"] = nvml.nvmlGpmQueryDeviceSupport(h).isSupportedDevice
                if not r["gpm_supported"]:
                    continue
                a = nvml.nvmlGpmSampleAlloc()
                b = nvml.nvmlGpmSampleAlloc()
                pairs[i] = (a, b)
                nvml.nvmlGpmSampleGet(h, a)
            except Exception as exc:
                r["error"] = err_text(exc)
        if pairs:
            time.sleep(sleep)
        for i, (a, b) in pairs.items():
            r = results[i]
            if "error" in r:
                continue
            try:
                nvml.nvmlGpmSampleGet(handles[i], b)
                r["gpm"] = _gpm_metrics(nvml, a, b)
                u = nvml.nvmlDeviceGetUtilizationRates(handles[i])
                r["util"] = [u.gpu, u.memory]
                r["power_w"] = nvml.nvmlDeviceGetPowerUsage(handles[i]) / 1000
            except Exception as exc:
                r["error"] = err_text(exc)
    finally:
        for a, b in pairs.values():
            for smp in (a, b):
                safe_call(nvml.nvmlGpmSampleFree, smp)
    return results


def _gpm_metrics(nvml: Any, a: Any, b: Any) -> dict[str, float]:
    ids = {name: getattr(nvml, const, None) for name, const in _GPM_METRICS}
    ids = {k: v for k, v in ids.items() if v is not None}
    mg = nvml.c_nvmlGpmMetricsGet_t()
    mg.version = nvml.NVML_GPM_METRICS_GET_VERSION
    mg.numMetrics = len(ids)
    mg.sample1, mg.sample2 = a, b
    for j, v in enumerate(ids.values()):
        mg.metrics[j].metricId = v
    nvml.nvmlGpmMetricsGet(mg)
    return {k: round(mg.metrics[j].value, 2) for j, k in enumerate(ids)}
