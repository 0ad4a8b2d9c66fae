"""The `processes` artefact (written by collect/processes.py) -> ProcessInfo facts. Pure.

Format::

    {"node_ip": "10.0.0.1" | null, "time": 1700000000.0,
     "processes": [{"pid", "ppid", "name", "cmdline": [...], "status", "cpu_seconds", "create_time",
                    "num_threads", "listen_ports": [...], "listen_addrs": ["ip:port", ...],
                    "env": {allow-listed}}]}

Optional keys may be missing or null (psutil may be denied a field). ``listen_addrs`` is newer than
the first format and may be absent.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, get_args

from slime_hangdoctor.errors import ParseError
from slime_hangdoctor.parsers.json_text import load_json
from slime_hangdoctor.source_spec import SourceSpec

# the source's name: the `source` of its probe records, the folder of its artefacts under raw/
PROCESSES = "processes"  # JSON list of process dicts (psutil), one artefact per node and sample

# Processes of one artefact (one node, one sample). A node of a slime job runs tens to hundreds;
# each costs about 20 us and 1 KB to parse and analyse (16 MiB of small rows took 22 s).
MAX_PROCESSES = 10_000


# --------------------------------------------------------------------------- facts


# Proxy variables: `ProcessInfo.env` keeps them in any letter case (Python's urllib, httpx, requests
# and reqwest read http_proxy and HTTP_PROXY alike), their URLs without user or password.
PROXY_ENV: frozenset[str] = frozenset({"http_proxy", "https_proxy", "all_proxy", "no_proxy"})


# psutil's process statuses (psutil.STATUS_*), and "unknown" for one a newer psutil adds
ProcessStatus = Literal[
    "running",
    "sleeping",
    "disk-sleep",
    "stopped",
    "tracing-stop",
    "zombie",
    "dead",
    "wake-kill",
    "waking",
    "idle",
    "locked",
    "waiting",
    "suspended",
    "parked",
    "unknown",
]


PROCESS_STATUSES: Final[frozenset[str]] = frozenset(get_args(ProcessStatus))


STATUS_ZOMBIE: Final[ProcessStatus] = "zombie"


STATUS_RUNNING: Final[ProcessStatus] = "running"  # state R: running, or waiting only for a CPU


STATUS_DISK_SLEEP: Final[ProcessStatus] = "disk-sleep"


STATUS_UNKNOWN: Final[ProcessStatus] = "unknown"


# gone from the process table's point of view: a zombie waiting to be reaped, or dead
STATUS_GONE: Final[frozenset[ProcessStatus]] = frozenset({"zombie", "dead"})


@dataclass(frozen=True)
class ProcessInfo:
    """One process as psutil / procfs saw it at one sample."""

    pid: int
    ppid: int | None
    name: str
    cmdline: tuple[str, ...]  # already redacted
    status: ProcessStatus
    cpu_seconds: float | None  # user + system, cumulative
    create_time: float | None = None
    num_threads: int | None = None
    listen_ports: tuple[int, ...] = ()
    listen_addrs: tuple[str, ...] = ()  # "ip:port" of TCP listening sockets
    env: Mapping[str, str] = field(default_factory=dict)  # allow-listed, non-secret keys only
    node_ip: str | None = None

    @property
    def title(self) -> str:
        """The process title (Ray and SGLang put their role in argv[0])."""
        return " ".join(a for a in self.cmdline if a).strip() or self.name


# The CPU a process wanted, beside the CPU it got (`cpu_seconds`): read by the kernel probe
# (collect/kernel.py, per sample) and by the watchdog's counters-only look (watchdog/counter_look.py)
@dataclass(frozen=True)
class SchedStat:
    """/proc/<pid>/schedstat: the main thread's nanoseconds on a CPU and waiting on a run queue."""

    run_ns: int
    wait_ns: int


def parse_schedstat(text: str) -> SchedStat:
    """``/proc/<pid>/schedstat``: ``run_ns wait_ns timeslices`` (Documentation/scheduler/sched-stats)."""
    fields = text.split()
    if len(fields) < 2 or not all(f.isdigit() for f in fields[:2]):
        raise ParseError(f"schedstat: not 'run wait slices': {text[:60]!r}")
    return SchedStat(int(fields[0]), int(fields[1]))


def parse_processes(text: str | bytes) -> tuple[ProcessInfo, ...]:
    """Every process of one processes artefact, tagged with the artefact's node_ip."""
    # Counted before decoding: each process is an object, with an `env` object inside.
    objects = text.count("{") if isinstance(text, str) else text.count(b"{")
    if objects > 2 * MAX_PROCESSES + 1:
        raise ParseError(
            f"processes: more than {MAX_PROCESSES} processes in one artefact ({objects} JSON "
            "objects): not read"
        )
    doc = _load(text)
    if not isinstance(doc, Mapping):
        raise ParseError(f"processes: expected a JSON object, got {type(doc).__name__}")
    procs = doc.get("processes")
    if not isinstance(procs, list):
        raise ParseError("processes: no 'processes' list")
    node_ip = doc.get("node_ip")
    if node_ip is not None and not isinstance(node_ip, str):
        raise ParseError("processes: 'node_ip' is not a string")
    if len(procs) > MAX_PROCESSES:
        raise ParseError(
            f"processes: more than {MAX_PROCESSES} processes in one artefact: not read"
        )
    out: list[ProcessInfo] = []
    for i, row in enumerate(procs):
        if not isinstance(row, Mapping):
            raise ParseError(f"processes: entry {i} is not an object")
        try:
            out.append(_process(row, node_ip or None))
        except ParseError as exc:
            raise ParseError(f"processes: entry {i}: {exc}") from None
    return tuple(out)


def _load(text: str | bytes) -> Any:
    return load_json(text, "processes", unit="artefact")


def _process(row: Mapping[str, Any], node_ip: str | None) -> ProcessInfo:
    pid = _int(row.get("pid"), "pid")
    if pid is None or pid <= 0:
        raise ParseError("missing or invalid 'pid'")
    return ProcessInfo(
        pid=pid,
        ppid=_int(row.get("ppid"), "ppid"),
        name=_str(row.get("name"), "name") or "",
        cmdline=_str_list(row.get("cmdline"), "cmdline"),
        status=_STATUSES.get(_str(row.get("status"), "status") or "", STATUS_UNKNOWN),
        cpu_seconds=_float(row.get("cpu_seconds"), "cpu_seconds"),
        create_time=_float(row.get("create_time"), "create_time"),
        num_threads=_int(row.get("num_threads"), "num_threads"),
        listen_ports=tuple(_port(p) for p in _list(row.get("listen_ports"), "listen_ports")),
        listen_addrs=_str_list(row.get("listen_addrs"), "listen_addrs"),
        env=_env(row.get("env")),
        node_ip=node_ip,
    )


# psutil's statuses as typed; one a newer psutil adds is "unknown"
_STATUSES: Mapping[str, ProcessStatus] = {s: s for s in get_args(ProcessStatus)}


def _list(value: Any, key: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ParseError(f"{key!r} is not a list")
    return value


def _str_list(value: Any, key: str) -> tuple[str, ...]:
    items = _list(value, key)
    if not all(isinstance(a, str) for a in items):
        raise ParseError(f"{key!r} holds a non-string")
    return tuple(items)


def _str(value: Any, key: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ParseError(f"{key!r} is not a string")
    return value


def _int(value: Any, key: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ParseError(f"{key!r} is not an integer")
    return value


def _float(value: Any, key: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ParseError(f"{key!r} is not a number")
    try:
        number = float(value)  # an int too large for a float raises OverflowError
    except OverflowError:
        raise ParseError(f"{key!r} is out of range") from None
    if not math.isfinite(number):
        raise ParseError(f"{key!r} is not finite")
    return number


def _port(value: Any) -> int:
    port = _int(value, "listen_ports")
    if port is None or not 0 < port < 65536:
        raise ParseError(f"invalid port {value!r}")
    return port


def _env(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ParseError("'env' is not an object")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ParseError("'env' holds a non-string")
    return dict(value)


# The process table of one node at one sample (collect/processes.py; the first step of every node's
# sample, so it has no NODE_PROBE). A 1000-process node writes about 0.5 MiB.
SPEC = SourceSpec[tuple[ProcessInfo, ...]](
    name=PROCESSES,
    parse=lambda data, rec: parse_processes(data),
    max_bytes=8 * 1024 * 1024,
    partial=True,
    discovery=True,
    analysis="slime_hangdoctor.analysis.parts.processes",
)
