"""The evidence sources: one line each. Everything else is in the source's own modules.

Each entry is the `SourceSpec` a source declares in its parser module (`parsers/<source>.py`); the
loader, the collector's node probes and the analysis iterate over this tuple, in its order (the
node probes run in it: the procfs reads first, while nothing holds the processes; each source's
findings come in it). docs/architecture.md walks through adding one.
"""

from __future__ import annotations

from typing import Any

from slime_hangdoctor.parsers import (
    flight_recorder,
    kernel,
    log_heads,
    logs,
    nccl_ras,
    nvml,
    processes,
    pyspy,
    ray_state,
    sglang,
    sockets,
)
from slime_hangdoctor.source_spec import SourceSpec

SPECS: tuple[SourceSpec[Any], ...] = (
    ray_state.SPEC,
    sockets.SPEC,
    processes.SPEC,
    kernel.SPEC,
    pyspy.SPEC,
    pyspy.TRACEBACK_SPEC,
    sglang.ENGINE_SPEC,
    sglang.ROUTER_SPEC,
    nvml.SPEC,
    nvml.GPM_SPEC,
    nccl_ras.SPEC,
    flight_recorder.SPEC,
    logs.SPEC,
    log_heads.SPEC,
)

BY_NAME: dict[str, SourceSpec[Any]] = {spec.name: spec for spec in SPECS}
