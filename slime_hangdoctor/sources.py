"""The evidence sources and the parts of the diagnosis: one list, one line each.

Two kinds of entry, in one order:
- `module:attribute` of `slime_hangdoctor.parsers`: a `SourceSpec` a source declares in its parser
  module (as Python's entry points do). The loader and the collector's node probes iterate over
  `SPECS`, its specs in this order (the node probes run in it: the procfs reads, sockets and
  kernel, before py-spy stops the processes: tests/unit/test_source_tables.py checks it).
- a module of `slime_hangdoctor.analysis.parts`: a part of the diagnosis that reads several sources
  (its `ANALYSIS`). A spec's own part (`SourceSpec.analysis`) sits at the spec's place.

The analysis runs its parts in this order (`analysis.source_analysis.source_analyses`): it breaks
ties between suspects and orders each section of a verdict's findings. A source is its own modules
and one line here; a rule that reads several sources is its own module and one line here.
docs/architecture.md walks through both; tests/unit/test_source_tables.py checks that every entry
resolves, in its layer, to what that layer runs.
"""

from __future__ import annotations

import importlib
from typing import Any

from slime_hangdoctor.source_spec import SourceSpec

PARSERS = "slime_hangdoctor.parsers."
PARTS = "slime_hangdoctor.analysis.parts."

ENTRIES: tuple[str, ...] = (
    "slime_hangdoctor.parsers.nccl_ras:SPEC",
    "slime_hangdoctor.parsers.flight_recorder:SPEC",
    "slime_hangdoctor.parsers.nvml:SPEC",
    "slime_hangdoctor.parsers.nvml:GPM_SPEC",
    "slime_hangdoctor.analysis.parts.gpu_kernel",
    "slime_hangdoctor.parsers.pyspy:SPEC",
    "slime_hangdoctor.parsers.pyspy:TRACEBACK_SPEC",
    "slime_hangdoctor.analysis.parts.known_bugs",
    "slime_hangdoctor.analysis.parts.ray_tasks",
    "slime_hangdoctor.analysis.parts.placement",
    "slime_hangdoctor.analysis.parts.plasma",
    "slime_hangdoctor.parsers.ray_state:SPEC",
    "slime_hangdoctor.parsers.processes:SPEC",
    "slime_hangdoctor.parsers.sglang:ROUTER_SPEC",
    "slime_hangdoctor.analysis.parts.rollout",
    "slime_hangdoctor.analysis.parts.driver",
    "slime_hangdoctor.parsers.sockets:SPEC",
    "slime_hangdoctor.analysis.parts.environ",
    "slime_hangdoctor.parsers.sglang:ENGINE_SPEC",
    "slime_hangdoctor.parsers.kernel:SPEC",
    "slime_hangdoctor.analysis.parts.progress",
    "slime_hangdoctor.analysis.parts.request_path",
    "slime_hangdoctor.analysis.parts.chain",
    "slime_hangdoctor.parsers.logs:SPEC",
    "slime_hangdoctor.parsers.log_heads:SPEC",
    "slime_hangdoctor.parsers.pressure:SPEC",
)


def _resolve(entry: str) -> SourceSpec[Any]:
    module, _, attribute = entry.partition(":")
    if not module.startswith(PARSERS):
        raise ValueError(f"{entry}: a source's spec lives in its parser module")
    spec = getattr(importlib.import_module(module), attribute)
    if not isinstance(spec, SourceSpec):
        raise TypeError(f"{entry} is not a SourceSpec")
    return spec


def _check(entry: str) -> str:
    if not entry.startswith((PARSERS, PARTS)):
        raise ValueError(f"{entry}: neither a source's spec nor a part of the diagnosis")
    return entry


SPECS: tuple[SourceSpec[Any], ...] = tuple(
    _resolve(entry) for entry in map(_check, ENTRIES) if entry.startswith(PARSERS)
)
BY_NAME: dict[str, SourceSpec[Any]] = {spec.name: spec for spec in SPECS}
