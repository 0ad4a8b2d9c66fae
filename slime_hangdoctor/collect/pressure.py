"""A node's pressure stall information (/proc/pressure/{cpu,memory,io}), once per sample.

Three small procfs reads; the kernel's texts are stored verbatim (parsers/pressure.py). A kernel
without PSI (CONFIG_PSI off, or booted with psi=0) has no such files, or refuses the read
(EOPNOTSUPP): the record is then `unavailable`, with the reason."""

from __future__ import annotations

import concurrent.futures as cf
from typing import Any

from slime_hangdoctor.bundle import BundleWriter, ProbeClock, ProbeRecord, dumps_json
from slime_hangdoctor.collect.node_probe import NodeContext
from slime_hangdoctor.outcome import Outcome
from slime_hangdoctor.parsers.pressure import PRESSURE, RESOURCES

PROC_PRESSURE = "/proc/pressure"
MAX_FILE_BYTES = 4096  # two lines of about 70 bytes


def scan_pressure(root: str = PROC_PRESSURE) -> dict[str, Any]:
    """{"cpu": text | None, "memory": .., "io": .., "errors": {resource: why}}."""
    doc: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for resource in RESOURCES:
        try:
            with open(f"{root}/{resource}", "rb") as fh:
                doc[resource] = fh.read(MAX_FILE_BYTES).decode("ascii", "replace")
        except OSError as exc:
            doc[resource] = None
            errors[resource] = exc.strerror or type(exc).__name__
    doc["errors"] = errors
    return doc


def record_pressure(
    writer: BundleWriter, *, node_ip: str | None, sample: int | None, root: str = PROC_PRESSURE
) -> ProbeRecord:
    """Read and store (source `pressure`); never raises."""
    record = ProbeClock(PRESSURE, "pressure", node_ip=node_ip, sample=sample).record
    try:
        doc = scan_pressure(root)
    except Exception as exc:  # noqa: BLE001 - a collector never raises past itself
        return writer.add(record(Outcome.FAILED, f"pressure read failed: {exc!r}"[:300]))
    errors: dict[str, str] = doc["errors"]
    if len(errors) == len(RESOURCES):
        why = "; ".join(f"{r}: {e}" for r, e in errors.items())
        return writer.add(record(Outcome.UNAVAILABLE, f"no pressure stall information ({why})"))
    reason = "; ".join(f"{r}: {e}" for r, e in errors.items()) or None
    return writer.add(record(Outcome.OK, reason), dumps_json(doc), suffix=".json")


def NODE_PROBE(ctx: NodeContext) -> list[cf.Future[Any]]:  # noqa: N802 - the spec's entry point
    """This node's pressure, where it hosts slime processes."""
    if not ctx.members():
        return []
    return [
        ctx.pool.submit(
            record_pressure, ctx.writer, node_ip=ctx.spec.node_ip, sample=ctx.spec.sample
        )
    ]
