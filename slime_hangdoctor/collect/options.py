"""What a collection run may do, for how long, and with which credentials."""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from slime_hangdoctor.redact import url_secrets


def resolve_token(token: str | None = None) -> str | None:
    """Ray's auth token, found as Ray 2.60 finds it: the explicit one, then ``RAY_AUTH_TOKEN``,
    then the file named by ``RAY_AUTH_TOKEN_PATH``, then ``~/.ray/auth_token``. None if none.
    (Here, below the dashboard client that sends it: `CollectOptions.secrets` blanks it too.)"""
    if token:
        return token.strip() or None
    env = os.environ.get("RAY_AUTH_TOKEN", "").strip()
    if env:
        return env
    path = os.environ.get("RAY_AUTH_TOKEN_PATH") or str(Path.home() / ".ray" / "auth_token")
    try:
        text = Path(path).expanduser().read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text or None


@dataclass(frozen=True)
class CollectOptions:
    window_s: float = 3.0  # two samples this far apart tell slow from hung
    timeout_s: float = 20.0  # the whole run's deadline
    probe_timeout_s: float = 2.5  # one probe (HTTP request, py-spy dump, RAS query)
    concurrency: int = 8  # probes in flight at once
    native: bool = False  # py-spy --native (pauses the target longer)
    stacks: bool = True  # py-spy stacks at all
    # The watchdog's mode: stacks at the first sample, and at the second only when nothing that
    # moves with work (tokens, Ray tasks, collectives) moved in between (a hang needs both samples to
    # tell parked from moving; a progressing job needs no second set). The result says whether
    # anything moved (CollectResult.work_moved).
    stacks_only_if_stalled: bool = False
    health: bool = False  # GET /health (>=0.4.10 runs a 1-token generation when the engine is idle)
    health_generate: bool = False  # GET /health_generate (runs a 1-token generation)
    flight_recorder: bool = False  # poke TORCH_NCCL_DEBUG_INFO_PIPE_FILE pipes (makes ranks dump)
    api_key: str | None = None
    ray_token: str | None = None
    sglang_urls: tuple[str, ...] = ()
    router_urls: tuple[str, ...] = ()
    local: bool = False  # no Ray: find slime processes on this node by their titles
    # Title discovery takes this user's processes only; None: the Ray session's owner, else ours.
    uid: int | None = None
    nvml_interval_s: float = 0.5
    ras_port: int = 28028  # NCCL's RAS port (NCCL_RAS_ADDR); collect/nccl_ras.py's DEFAULT_PORT
    gpm: bool = True
    # PCIe throughput, per-process GPU utilisation and GPM: what names a GPU's process and tells a
    # busy GPU from a spinning one. Off in the watchdog's stackless look, which only asks whether
    # work moved (utilisation, NVLink counters): ~12 of its ~16 ms of CPU per GPU on an H200.
    gpu_detail: bool = True
    # Tails of the driver's and the slime actors' logs through Ray's log API, fetched while the
    # second sample is taken (off in the watchdog's stackless look: it only asks whether work moved).
    logs: bool = True
    # The task history of each RUNNING job (every state, up to 1000 rows: who ran what, the calls
    # queued behind an actor), asked at the second sample. Off in the watchdog's stackless look,
    # which only asks whether work moved: on a long job it is most of the bundle's bytes (841 KB
    # of 1.4 MB on the demo), all of them parsed and redacted.
    history: bool = True
    pyspy: str | None = None  # py-spy binary; None = find it
    extra: dict[str, str] = field(default_factory=dict)

    def secrets(self, address: str | None = None) -> tuple[str, ...]:
        """Every secret this run was given, to blank wherever it shows up: the API key, Ray's
        token (also the one Ray would read from RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token), and the
        credentials in the URLs (the Ray address, --sglang-url, --router-url)."""
        found = [self.api_key, self.ray_token, resolve_token(self.ray_token)]
        for url in (address, *self.sglang_urls, *self.router_urls):
            found.extend(url_secrets(url))
        return tuple(dict.fromkeys(s for s in found if s))


# The watchdog's (check, watch) defaults: a shorter window (it runs often and compares with its last
# run's markers) and a longer deadline (it must not report a slow cluster as unknown).
WATCHDOG_DEFAULTS = CollectOptions(window_s=2.0, timeout_s=30.0)


@dataclass(frozen=True)
class CheckDefaults:
    """The watchdog's own settings when not given, beside the CollectOptions of WATCHDOG_DEFAULTS:
    the command line (check, watch) shows and takes them, and watchdog/run.py's CheckOptions
    defaults to them. Its switches (--bundle-dir, --on-stall-*, --prom-file, --log-file) are off
    unless given, and have no value here."""

    stall_after_s: float = 600.0  # no progress for this long is CRITICAL
    keep_bundles: int = 5  # stall bundles kept in --bundle-dir
    interval_s: float = 60.0  # watch: seconds between runs


CHECK_DEFAULTS = CheckDefaults()


class Deadline:
    """The run's deadline: every wait and probe timeout is clamped to what is left."""

    def __init__(self, seconds: float) -> None:
        self.start = time.monotonic()
        self.end = self.start + max(0.0, seconds)

    def remaining(self) -> float:
        return max(0.0, self.end - time.monotonic())

    def clamp(self, timeout: float) -> float:
        return max(0.05, min(timeout, self.remaining()))

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    @property
    def expired(self) -> bool:
        return self.remaining() <= 0.0


def process_age_s() -> float:
    """Seconds since this process started (Linux: /proc/self/stat's start time, in clock ticks
    since boot, against the boot clock); 0.0 where that cannot be read."""
    try:
        with open("/proc/self/stat", "rb") as f:
            stat = f.read()
        fields = stat[stat.rindex(b")") + 2 :].split()  # fields 3.. of proc(5): comm may hold ')'
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22, starttime
        return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - started)
    except (OSError, ValueError, IndexError, AttributeError):
        return 0.0


# monotonic time at which this program's process started: set by the console script's entry
# (`mark_process_start`), None where the CLI runs inside another program (tests, an embedding)
_PROCESS_STARTED: list[float] = []


def mark_process_start() -> None:
    """Called once by the program's entry (__main__.main): its process's start, on the monotonic
    clock, is what a one-shot run's deadline counts from."""
    _PROCESS_STARTED[:] = [time.monotonic() - process_age_s()]


def from_process_start(opts: CollectOptions) -> CollectOptions:
    """A one-shot run's options: its deadline (--timeout, "for the whole run") counts from the
    process's start, so the interpreter's start and the imports are taken from it (1 s is always
    left). Unchanged where the program's entry did not mark the start (the CLI run in-process),
    and never used by `watch`, each of whose runs has the whole deadline."""
    if not _PROCESS_STARTED:
        return opts
    spent = time.monotonic() - _PROCESS_STARTED[0]
    return dataclasses.replace(opts, timeout_s=max(1.0, opts.timeout_s - spent))
