"""NVML samples and GPM readings -> `GpuSeries` / `GpmReading` facts.

`parse_nvml_series` reads the `nvml` artefact:
`{"driver", "samples": [{"t", "gpus": [{"i", "util": [gpu, mem], "power_w", "sm_mhz",
"pcie_tx_kbs", "pcie_rx_kbs", "nvlink": [[ret, tx], [ret, rx]], "procs": [[pid, mem]],
"proc_util": [[pid, sm, mem, ts]]}]}]}` (the format of the real H200 fixtures), and the one-shot
form `{"gpus": [...]}` as a series of one sample at t=0.

A field NVML could not read is missing, null or an error string (`"ERR NVMLError_NotSupported:
..."`): it becomes None (or `()` for the process lists). An NVLink counter whose NVML return code
is not 0 becomes None. Any other wrong type is corruption and raises `ParseError`. Sample times
are made relative to the first sample.

`parse_gpm` reads the `gpm` artefact: `[{"i", "gpm_supported", "gpm": {"SM_UTIL": ..., ...}}]`.
Pure: no I/O. Bad input raises `ParseError` and nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from slime_hangdoctor.errors import ParseError
from slime_hangdoctor.facts import GpuProcessUtil, GpuReading, GpuSample, GpuSeries
from slime_hangdoctor.parsers.json_text import load_json
from slime_hangdoctor.parsers.ray_state import RAY_STATE
from slime_hangdoctor.source_spec import Facts, Join, SourceSpec

# the sources' names: the `source` of their probe records, the folders of their artefacts under raw/
NVML = "nvml"  # JSON series of GPU samples of one node
GPM = "gpm"  # JSON list of GPM readings of one node

__all__ = ["parse_gpm", "parse_nvml_series"]


# --------------------------------------------------------------------------- field readers


# --------------------------------------------------------------------------- facts


@dataclass(frozen=True)
class GpmReading:
    """Hopper+ GPM metrics of one GPU over a short interval (percent, or bytes/s for NVLINK)."""

    index: int
    supported: bool
    metrics: Mapping[str, float] = field(default_factory=dict)


def _load(text: str, what: str) -> Any:
    return load_json(text, what, unit="artefact")


def _is_unread(value: object) -> bool:
    """Missing, null or an NVML error string: NVML did not give this field."""
    return value is None or isinstance(value, str)


def _int(value: object, what: str) -> int | None:
    if _is_unread(value):
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ParseError(f"NVML: {what} is {type(value).__name__}, not an integer")
    return value


def _number(value: object, what: str) -> float | None:
    if _is_unread(value):
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ParseError(f"NVML: {what} is {type(value).__name__}, not a number")
    return _to_float(value, what)


def _to_float(value: float, what: str) -> float:
    try:
        return float(value)
    except OverflowError:  # a JSON integer with hundreds of digits
        raise ParseError(f"NVML: {what} is out of range") from None


def _list(value: object, what: str) -> list[Any] | None:
    if _is_unread(value):
        return None
    if not isinstance(value, list):
        raise ParseError(f"NVML: {what} is {type(value).__name__}, not a list")
    return value


def _required_int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ParseError(f"NVML: {what} is {type(value).__name__}, not an integer")
    return value


# --------------------------------------------------------------------------- one GPU


def _util(value: object, idx: int) -> tuple[int | None, int | None]:
    pair = _list(value, f"GPU {idx} util")
    if pair is None:
        return None, None
    if len(pair) != 2:
        raise ParseError(f"NVML: GPU {idx} util has {len(pair)} values, not [gpu, memory]")
    return _int(pair[0], f"GPU {idx} util.gpu"), _int(pair[1], f"GPU {idx} util.memory")


def _nvlink(value: object, idx: int) -> tuple[int | None, int | None]:
    """`[[ret, tx], [ret, rx]]`: NVML field values with their return codes (0 = success)."""
    pairs = _list(value, f"GPU {idx} nvlink")
    if pairs is None:
        return None, None
    out: list[int | None] = []
    for pos in range(2):
        item = _list(pairs[pos] if pos < len(pairs) else None, f"GPU {idx} nvlink[{pos}]")
        if item is None:
            out.append(None)
            continue
        if len(item) != 2:
            raise ParseError(f"NVML: GPU {idx} nvlink[{pos}] is not [ret, value]")
        ret = _int(item[0], f"GPU {idx} nvlink[{pos}] return code")
        counter = _int(item[1], f"GPU {idx} nvlink[{pos}] value")
        out.append(counter if ret == 0 else None)
    return out[0], out[1]


def _procs(value: object, idx: int) -> tuple[tuple[int, int | None], ...]:
    rows = _list(value, f"GPU {idx} procs") or []
    out: list[tuple[int, int | None]] = []
    for row in rows:
        if not isinstance(row, list) or not row:
            raise ParseError(f"NVML: GPU {idx} procs row is not [pid, used_memory]")
        pid = _required_int(row[0], f"GPU {idx} process pid")
        mem = _int(row[1], f"GPU {idx} process memory") if len(row) > 1 else None
        out.append((pid, mem))
    return tuple(out)


def _proc_util(value: object, idx: int) -> tuple[GpuProcessUtil, ...]:
    rows = _list(value, f"GPU {idx} proc_util") or []
    out: list[GpuProcessUtil] = []
    for row in rows:
        if not isinstance(row, list) or len(row) < 3:
            raise ParseError(f"NVML: GPU {idx} proc_util row is not [pid, sm, mem, ts]")
        out.append(
            GpuProcessUtil(
                pid=_required_int(row[0], f"GPU {idx} proc_util pid"),
                sm_util=_required_int(row[1], f"GPU {idx} proc_util sm"),
                mem_util=_required_int(row[2], f"GPU {idx} proc_util mem"),
            )
        )
    return tuple(out)


def _gpu(raw: object, position: int) -> GpuReading:
    if not isinstance(raw, dict):
        raise ParseError(f"NVML: GPU entry {position} is {type(raw).__name__}, not an object")
    idx = position if raw.get("i") is None else _required_int(raw.get("i"), "GPU index 'i'")
    util_gpu, util_mem = _util(raw.get("util"), idx)
    nvlink_tx, nvlink_rx = _nvlink(raw.get("nvlink"), idx)
    uuid = raw.get("uuid")
    return GpuReading(
        index=idx,
        util_gpu=util_gpu,
        util_mem=util_mem,
        power_w=_number(raw.get("power_w"), f"GPU {idx} power_w"),
        sm_mhz=_int(raw.get("sm_mhz"), f"GPU {idx} sm_mhz"),
        pcie_tx_kbs=_int(raw.get("pcie_tx_kbs"), f"GPU {idx} pcie_tx_kbs"),
        pcie_rx_kbs=_int(raw.get("pcie_rx_kbs"), f"GPU {idx} pcie_rx_kbs"),
        nvlink_tx=nvlink_tx,
        nvlink_rx=nvlink_rx,
        processes=_procs(raw.get("procs"), idx),
        process_util=_proc_util(raw.get("proc_util"), idx),
        uuid=uuid if isinstance(uuid, str) and not uuid.startswith("ERR") else None,
    )


def _gpus(value: object, where: str) -> tuple[GpuReading, ...]:
    if not isinstance(value, list):
        raise ParseError(f"NVML: {where} has no 'gpus' list")
    return tuple(_gpu(g, pos) for pos, g in enumerate(value))


# --------------------------------------------------------------------------- series


def _sample_time(raw: dict[str, Any], pos: int, count: int) -> float:
    t = raw.get("t")
    if t is None and count == 1:
        return 0.0
    if isinstance(t, bool) or not isinstance(t, (int, float)):
        raise ParseError(f"NVML: sample {pos} has no numeric time 't'")
    return _to_float(t, f"sample {pos} time")


def _samples(raw_samples: list[Any]) -> tuple[GpuSample, ...]:
    if not raw_samples:
        raise ParseError("NVML: the series has no samples")
    out: list[GpuSample] = []
    t0: float | None = None
    for pos, raw in enumerate(raw_samples):
        if not isinstance(raw, dict):
            raise ParseError(f"NVML: sample {pos} is {type(raw).__name__}, not an object")
        t = _sample_time(raw, pos, len(raw_samples))
        t0 = t if t0 is None else t0
        out.append(GpuSample(t=round(t - t0, 6), gpus=_gpus(raw.get("gpus"), f"sample {pos}")))
    return tuple(out)


def _text_field(value: object) -> str | None:
    if isinstance(value, str) and value and not value.startswith("ERR"):
        return value
    return None


def parse_nvml_series(text: str) -> GpuSeries:
    """Parse an NVML sample series (or the one-shot `{"gpus": [...]}` form) of one node."""
    data = _load(text, "NVML")
    if not isinstance(data, dict):
        raise ParseError(f"NVML: top level is {type(data).__name__}, not an object")
    raw_samples = data.get("samples")
    if raw_samples is None:
        if "gpus" not in data:
            raise ParseError("NVML: neither 'samples' nor 'gpus' in the artefact")
        samples: tuple[GpuSample, ...] = (GpuSample(t=0.0, gpus=_gpus(data["gpus"], "artefact")),)
    elif isinstance(raw_samples, list):
        samples = _samples(raw_samples)
    else:
        raise ParseError("NVML: 'samples' is not a list")
    return GpuSeries(
        samples=samples,
        driver=_text_field(data.get("driver")),
        node_ip=_text_field(data.get("node_ip")),
    )


# --------------------------------------------------------------------------- GPM


def _gpm_supported(value: object, idx: int) -> bool:
    if value is None or isinstance(value, str):
        return False
    if isinstance(value, (bool, int)) and not isinstance(value, float):
        return bool(value)
    raise ParseError(f"GPM: GPU {idx} gpm_supported is {type(value).__name__}")


def _gpm_metrics(value: object, idx: int) -> dict[str, float]:
    if value is None or isinstance(value, str):
        return {}
    if not isinstance(value, dict):
        raise ParseError(f"GPM: GPU {idx} 'gpm' is {type(value).__name__}, not an object")
    metrics: dict[str, float] = {}
    for name, reading in value.items():
        number = _number(reading, f"GPM GPU {idx} {name}")
        if number is not None:
            metrics[str(name)] = number
    return metrics


def _gpm_reading(raw: object, position: int) -> GpmReading:
    if not isinstance(raw, dict):
        raise ParseError(f"GPM: entry {position} is {type(raw).__name__}, not an object")
    idx = position if raw.get("i") is None else _required_int(raw.get("i"), "GPM GPU index")
    metrics = _gpm_metrics(raw.get("gpm"), idx)
    supported = _gpm_supported(raw.get("gpm_supported"), idx)
    return GpmReading(index=idx, supported=supported, metrics=metrics)


def parse_gpm(text: str) -> tuple[GpmReading, ...]:
    """Parse GPM readings: a JSON list of GPUs (or `{"gpus": [...]}`)."""
    data = _load(text, "GPM")
    if isinstance(data, dict) and isinstance(data.get("gpus"), list):
        data = data["gpus"]
    if not isinstance(data, list):
        raise ParseError(f"GPM: top level is {type(data).__name__}, not a list of GPUs")
    return tuple(_gpm_reading(g, pos) for pos, g in enumerate(data))


class GpuVia(str, Enum):
    """Who read a GPU series: the local NVML sampler, or Ray's node summary (util and power only)."""

    NVML = "nvml"
    RAY_SUMMARY = "ray_summary"


@dataclass(frozen=True)
class GpuObs:
    node_ip: str | None
    series: GpuSeries
    via: GpuVia = GpuVia.NVML


def _series_of(facts: Facts) -> tuple[GpuObs, ...]:
    """NVML's series of each node; Ray's node summary for a node NVML was not read on."""
    nvml = tuple(GpuObs(obs.node_ip, obs.fact) for obs in facts.facts(SPEC))
    nodes = {g.node_ip for g in nvml}
    summary = facts.joined(RAY_STATE).summary_gpus
    return nvml + tuple(
        GpuObs(g.node_ip, g, GpuVia.RAY_SUMMARY) for g in summary if g.node_ip not in nodes
    )


# The GPU series of one node, sampled across the window (collect/nvml.py).
SPEC = SourceSpec[GpuSeries](
    name=NVML,
    parse=lambda data, rec: parse_nvml_series(data.decode("utf-8", "replace")),
    max_bytes=16 * 1024 * 1024,
    partial=True,
    analysis="slime_hangdoctor.analysis.parts.gpu",
)

# GPM readings of one node (collect/nvml.py, after the series).
GPM_SPEC = SourceSpec[tuple[GpmReading, ...]](
    name=GPM,
    parse=lambda data, rec: parse_gpm(data.decode("utf-8", "replace")),
    max_bytes=16 * 1024 * 1024,
    partial=True,
)


# Every GPU series of the bundle: NVML's, and Ray's node summary's where NVML gave none.
GPU_SERIES = Join("gpus", _series_of)
