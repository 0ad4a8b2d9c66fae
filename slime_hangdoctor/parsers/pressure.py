"""The `pressure` artefact (collect/pressure.py): a node's Linux pressure stall information -> a
NodePressure. Pure.

Artefact format (the kernel's files, verbatim; docs.kernel.org/accounting/psi.html)::

    {"cpu": "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\\nfull ...\\n" | null,
     "memory": ..., "io": ..., "errors": {"<resource>": "<why not read>"}}

`some`: the share of time at least one task stalled on the resource; `full`: all non-idle tasks
at once. `total` is the stall time in microseconds since boot, so two samples give the share of
the window that was lost.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from slime_hangdoctor.bundle import ProbeRecord
from slime_hangdoctor.errors import ParseError
from slime_hangdoctor.parsers.json_text import load_json_object
from slime_hangdoctor.source_spec import SourceSpec

PRESSURE = "pressure"  # the source's name (ProbeRecord.source, the folder under raw/)
RESOURCES = ("cpu", "memory", "io")
_LINE = re.compile(
    r"^(?P<kind>some|full) avg10=(?P<avg10>\d{1,3}\.\d{2}) avg60=\d{1,3}\.\d{2} "
    r"avg300=\d{1,3}\.\d{2} total=(?P<total>\d{1,20})$"
)


@dataclass(frozen=True)
class Stall:
    """One line of a pressure file."""

    avg10: float  # percent of the last 10 s
    total_us: int  # stall time since boot


@dataclass(frozen=True)
class ResourcePressure:
    resource: str  # cpu | memory | io
    some: Stall
    full: Stall | None  # absent for cpu before Linux 5.13


@dataclass(frozen=True)
class NodePressure:
    resources: tuple[ResourcePressure, ...]
    errors: tuple[tuple[str, str], ...] = ()  # (resource, why it was not read)

    def of(self, resource: str) -> ResourcePressure | None:
        return next((r for r in self.resources if r.resource == resource), None)


def parse_pressure_file(resource: str, text: str) -> ResourcePressure:
    """One /proc/pressure/<resource> file."""
    stalls: dict[str, Stall] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        match = _LINE.match(line.strip())
        if match is None:
            raise ParseError(f"pressure {resource}: not a PSI line: {line[:80]!r}")
        stalls[match["kind"]] = Stall(float(match["avg10"]), int(match["total"]))
    if "some" not in stalls:
        raise ParseError(f"pressure {resource}: no 'some' line")
    return ResourcePressure(resource, stalls["some"], stalls.get("full"))


def parse_pressure(data: bytes) -> NodePressure:
    obj = load_json_object(data, "pressure")
    found: list[ResourcePressure] = []
    for resource in RESOURCES:
        text = obj.get(resource)
        if text is None:
            continue
        if not isinstance(text, str):
            raise ParseError(f"pressure {resource}: not a text")
        found.append(parse_pressure_file(resource, text))
    raw_errors = obj.get("errors") or {}
    if not isinstance(raw_errors, Mapping):
        raise ParseError("pressure errors: not an object")
    errors = tuple((str(k)[:40], str(v)[:200]) for k, v in sorted(raw_errors.items()))
    return NodePressure(tuple(found), errors)


def _notes(node: NodePressure, rec: ProbeRecord) -> tuple[str, ...]:
    where = rec.node_ip or "this node"
    return tuple(
        f"pressure of {where}: {resource} not read ({why})" for resource, why in node.errors
    )


SPEC = SourceSpec[NodePressure](
    name=PRESSURE,
    parse=lambda data, rec: parse_pressure(data),
    max_bytes=64 * 1024,  # three files of two lines
    notes=_notes,
    node_probe="slime_hangdoctor.collect.pressure",
    analysis="slime_hangdoctor.analysis.parts.pressure",
)
