"""The evidence sources: one line each. Everything else is in the source's own modules.

Each entry names the `SourceSpec` a source declares in its parser module (`module:attribute`, as
Python's entry points do); the loader, the collector's node probes and the analysis iterate over
`SPECS`, in this order (the node probes run in it: the procfs reads first, while nothing holds the
processes; each source's findings come in it). docs/architecture.md walks through adding one;
tests/unit/test_source_tables.py checks that every entry resolves to a spec of its own name.
"""

from __future__ import annotations

import importlib
from typing import Any

from slime_hangdoctor.source_spec import SourceSpec

ENTRIES: tuple[str, ...] = (
    "slime_hangdoctor.parsers.ray_state:SPEC",
    "slime_hangdoctor.parsers.sockets:SPEC",
    "slime_hangdoctor.parsers.processes:SPEC",
    "slime_hangdoctor.parsers.kernel:SPEC",
    "slime_hangdoctor.parsers.pyspy:SPEC",
    "slime_hangdoctor.parsers.pyspy:TRACEBACK_SPEC",
    "slime_hangdoctor.parsers.sglang:ENGINE_SPEC",
    "slime_hangdoctor.parsers.sglang:ROUTER_SPEC",
    "slime_hangdoctor.parsers.nvml:SPEC",
    "slime_hangdoctor.parsers.nvml:GPM_SPEC",
    "slime_hangdoctor.parsers.nccl_ras:SPEC",
    "slime_hangdoctor.parsers.flight_recorder:SPEC",
    "slime_hangdoctor.parsers.logs:SPEC",
    "slime_hangdoctor.parsers.log_heads:SPEC",
    "slime_hangdoctor.parsers.pressure:SPEC",
)


def _resolve(entry: str) -> SourceSpec[Any]:
    module, _, attribute = entry.partition(":")
    if not module.startswith("slime_hangdoctor.parsers."):
        raise ValueError(f"{entry}: a source's spec lives in its parser module")
    spec = getattr(importlib.import_module(module), attribute)
    if not isinstance(spec, SourceSpec):
        raise TypeError(f"{entry} is not a SourceSpec")
    return spec


SPECS: tuple[SourceSpec[Any], ...] = tuple(_resolve(entry) for entry in ENTRIES)
BY_NAME: dict[str, SourceSpec[Any]] = {spec.name: spec for spec in SPECS}
