"""How one probe ended: the outcome every probe record carries, and the facts and the analysis
decide on (never on the text of an error)."""

from __future__ import annotations

from enum import Enum


class Outcome(str, Enum):
    """How one probe ended (the manifest keeps one per probe)."""

    OK = "ok"
    UNAVAILABLE = "unavailable"  # the thing is not there (no NVML, connection refused, no pipe)
    DENIED = "denied"  # permission (ptrace, 401/403, 403 profiling disabled)
    TIMED_OUT = "timed_out"
    FAILED = "failed"  # it answered, but not usefully (garbage, crash, parse error)
