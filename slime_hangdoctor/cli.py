"""The `slime-hangdoctor` command line: the only composer of collect, analysis and render."""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Protocol, cast

import typer

from slime_hangdoctor import __version__
from slime_hangdoctor.collect.options import WATCHDOG_DEFAULTS, CollectOptions
from slime_hangdoctor.errors import HangDoctorError
from slime_hangdoctor.verdict import Diagnosis, ExitCode, ReportFormat
from slime_hangdoctor.watchdog.state import DEFAULT_STATE_FILE

if TYPE_CHECKING:
    from slime_hangdoctor.watchdog.run import CheckOptions

app = typer.Typer(
    name="slime-hangdoctor",
    help="Tell, in seconds, why a slime RL training job has stopped making progress.\n\n"
    "Exit codes: 0 OK (progressing or idle), 1 WARNING (suspected stall), 2 CRITICAL (hung), "
    "3 UNKNOWN (could not diagnose, or bad arguments).",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

# Every default comes from the options objects (CollectOptions; the watchdog's WATCHDOG_DEFAULTS),
# never a second literal here.
DEFAULTS = CollectOptions()

# ------------------------------------------------------------------ shared options

AddressArg = Annotated[
    str | None,
    typer.Argument(
        help="Ray address: 'auto' or nothing (RAY_ADDRESS, then the local cluster), 'host:6379' (GCS), "
        "or 'http://host:8265' (dashboard).",
        show_default=False,
    ),
]
WindowOpt = Annotated[
    float,
    typer.Option(
        "--window", min=0.0, help="Seconds between the two samples that tell slow from hung."
    ),
]
TimeoutOpt = Annotated[
    float, typer.Option("--timeout", min=1.0, help="Deadline for the whole run, in seconds.")
]
ProbeTimeoutOpt = Annotated[
    float,
    typer.Option("--probe-timeout", min=0.1, help="Timeout of one probe (HTTP call, py-spy dump)."),
]
FormatOpt = Annotated[
    ReportFormat, typer.Option("--format", "-f", case_sensitive=False, help="Output format.")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Alias of --format json.")]
OutOpt = Annotated[
    Path | None,
    typer.Option(
        "--out",
        help="Keep the evidence bundle in this directory (and DIR.tar.gz) for a bug report.",
    ),
]
NativeOpt = Annotated[
    bool,
    typer.Option(
        "--native",
        help="OPT-IN, touches the job: py-spy --native stacks (C/C++ frames; pauses each target ~0.2-1 s).",
    ),
]
HealthOpt = Annotated[
    bool,
    typer.Option(
        "--health",
        help="OPT-IN, touches the job: GET /health on engines. Since SGLang 0.4.10 it runs a 1-token "
        "generation on an idle engine (unsafe on an offloaded colocate engine); default probes use "
        "/model_info, /server_info, /v1/loads and /metrics instead.",
    ),
]
HealthGenOpt = Annotated[
    bool,
    typer.Option(
        "--health-generate",
        help="OPT-IN, touches the job: GET /health_generate on engines (runs a 1-token generation; "
        "never use on offloaded colocate engines).",
    ),
]
FlightOpt = Annotated[
    bool,
    typer.Option(
        "--flight-recorder",
        help="OPT-IN, touches the job: write the TORCH_NCCL_DEBUG_INFO_PIPE_FILE pipes found in the ranks' "
        "environment so each rank dumps its PyTorch flight recorder, and read the dumps.",
    ),
]
ApiKeyOpt = Annotated[
    str | None,
    typer.Option(
        "--api-key", envvar="SGLANG_API_KEY", help="API key of SGLang servers started with one."
    ),
]
RayTokenOpt = Annotated[
    str | None,
    typer.Option(
        "--ray-token", envvar="RAY_AUTH_TOKEN", help="Token for Ray clusters with token auth."
    ),
]
SglangUrlOpt = Annotated[
    list[str] | None,
    typer.Option("--sglang-url", help="Also probe this SGLang engine (repeatable)."),
]
RouterUrlOpt = Annotated[
    list[str] | None,
    typer.Option("--router-url", help="Also probe this SGLang router (repeatable)."),
]
LocalOpt = Annotated[
    bool,
    typer.Option(
        "--local", help="No Ray connection: find slime processes on this node by their titles."
    ),
]
UidOpt = Annotated[
    int | None,
    typer.Option(
        "--uid",
        min=0,
        help="With --local: take only this user's processes (default: the owner of the local Ray "
        "session, else the user running the doctor; a root doctor never takes other users').",
        show_default=False,
    ),
]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress display.")]
RasPortOpt = Annotated[
    int,
    typer.Option(
        "--ras-port",
        min=1,
        max=65535,
        help="TCP port of NCCL's RAS service on 127.0.0.1 (NCCL_RAS_ADDR's port).",
    ),
]


def _fmt(fmt: ReportFormat, as_json: bool) -> ReportFormat:
    return ReportFormat.JSON if as_json else fmt


def _options(
    *,
    window: float,
    timeout: float,
    probe_timeout: float,
    api_key: str | None,
    ray_token: str | None,
    sglang_url: list[str] | None,
    router_url: list[str] | None,
    local: bool,
    uid: int | None = None,
    ras_port: int,
    native: bool = DEFAULTS.native,
    health: bool = DEFAULTS.health,
    health_generate: bool = DEFAULTS.health_generate,
    flight_recorder: bool = DEFAULTS.flight_recorder,
) -> CollectOptions:
    """The one place the command-line options become a CollectOptions.

    Where to look (Ray token, engines, routers, the RAS port, --local) is an option of every live
    command: attach, collect, check and watch. What touches the job (--native, --health,
    --health-generate, --flight-recorder) is an option of attach and collect only; the watchdog
    never touches the job on a routine look, and has its own --on-stall-* switches for a stall.
    """
    return CollectOptions(
        window_s=window,
        timeout_s=timeout,
        probe_timeout_s=probe_timeout,
        native=native,
        health=health,
        health_generate=health_generate,
        flight_recorder=flight_recorder,
        api_key=api_key,
        ray_token=ray_token,
        sglang_urls=tuple(sglang_url or ()),
        router_urls=tuple(router_url or ()),
        local=local,
        uid=uid,
        ras_port=ras_port,
    )


# ------------------------------------------------------------------ commands


@app.command()
def attach(
    address: AddressArg = None,
    window: WindowOpt = DEFAULTS.window_s,
    timeout: TimeoutOpt = DEFAULTS.timeout_s,
    probe_timeout: ProbeTimeoutOpt = DEFAULTS.probe_timeout_s,
    fmt: FormatOpt = ReportFormat.TEXT,
    as_json: JsonOpt = False,
    out: OutOpt = None,
    native: NativeOpt = False,
    health: HealthOpt = False,
    health_generate: HealthGenOpt = False,
    flight_recorder: FlightOpt = False,
    api_key: ApiKeyOpt = None,
    ray_token: RayTokenOpt = None,
    sglang_url: SglangUrlOpt = None,
    router_url: RouterUrlOpt = None,
    local: LocalOpt = False,
    uid: UidOpt = None,
    quiet: QuietOpt = False,
    ras_port: RasPortOpt = DEFAULTS.ras_port,
) -> None:
    """Diagnose a live slime job: discover, sample twice, analyse, report. Read-only by default."""
    output = _fmt(fmt, as_json)
    opts = _options(
        window=window,
        timeout=timeout,
        probe_timeout=probe_timeout,
        native=native,
        health=health,
        health_generate=health_generate,
        flight_recorder=flight_recorder,
        api_key=api_key,
        ray_token=ray_token,
        sglang_url=sglang_url,
        router_url=router_url,
        local=local,
        uid=uid,
        ras_port=ras_port,
    )
    diagnosis = run_attach(address, opts, out=out, quiet=quiet or output is not ReportFormat.TEXT)
    _emit(diagnosis, output)


@app.command()
def collect(
    out: Annotated[
        Path, typer.Option("--out", help="Directory to write the evidence bundle into.")
    ],
    address: AddressArg = None,
    window: WindowOpt = DEFAULTS.window_s,
    timeout: TimeoutOpt = DEFAULTS.timeout_s,
    probe_timeout: ProbeTimeoutOpt = DEFAULTS.probe_timeout_s,
    native: NativeOpt = False,
    health: HealthOpt = False,
    health_generate: HealthGenOpt = False,
    flight_recorder: FlightOpt = False,
    api_key: ApiKeyOpt = None,
    ray_token: RayTokenOpt = None,
    sglang_url: SglangUrlOpt = None,
    router_url: RouterUrlOpt = None,
    local: LocalOpt = False,
    uid: UidOpt = None,
    quiet: QuietOpt = False,
    ras_port: RasPortOpt = DEFAULTS.ras_port,
) -> None:
    """Write an evidence bundle (DIR and DIR.tar.gz) without analysing it."""
    from slime_hangdoctor.bundle import archive
    from slime_hangdoctor.collect.run import collect as do_collect

    opts = _options(
        window=window,
        timeout=timeout,
        probe_timeout=probe_timeout,
        native=native,
        health=health,
        health_generate=health_generate,
        flight_recorder=flight_recorder,
        api_key=api_key,
        ray_token=ray_token,
        sglang_url=sglang_url,
        router_url=router_url,
        local=local,
        uid=uid,
        ras_port=ras_port,
    )
    with _progress(quiet) as say:
        result = do_collect(address, opts, out, command="collect", progress=say)
    if result.ray_error and not local:
        _err(f"could not read the Ray cluster: {result.ray_error}")
    tarball = archive(result.root)
    failed = sum(1 for p in result.manifest.probes if p.outcome.value != "ok")
    typer.echo(
        f"bundle: {result.root} ({len(result.manifest.probes)} probes, {failed} not ok, "
        f"{result.elapsed_s:.1f}s); archive: {tarball}"
    )


@app.command()
def analyse(
    bundle: Annotated[
        Path, typer.Argument(help="A bundle directory or .tar.gz written by collect/attach/check.")
    ],
    fmt: FormatOpt = ReportFormat.TEXT,
    as_json: JsonOpt = False,
) -> None:
    """Analyse an evidence bundle offline (record once, report many)."""
    output = _fmt(fmt, as_json)
    diagnosis = analyse_bundle(bundle)
    _emit(diagnosis, output)


@app.command()
def demo(
    fault: Annotated[
        str, typer.Option("--fault", help="Fault to inject (see --list-faults).")
    ] = "weight_sync_engine_missing",
    list_faults: Annotated[
        bool, typer.Option("--list-faults", help="List the faults and exit.")
    ] = False,
    window: WindowOpt = DEFAULTS.window_s,
    fmt: FormatOpt = ReportFormat.TEXT,
    as_json: JsonOpt = False,
    out: OutOpt = None,
    workdir: Annotated[
        Path | None, typer.Option("--workdir", help="Where the demo's Ray cluster keeps its files.")
    ] = None,
    quiet: QuietOpt = False,
) -> None:
    """Start a local Ray cluster, run a small slime-shaped job with a fault, and diagnose it."""
    from slime_hangdoctor.demo.faults import FAULTS

    if list_faults:
        for name, spec in FAULTS.items():
            typer.echo(f"{name:32} {spec.description}")
        return
    if fault not in FAULTS:
        raise HangDoctorError(f"unknown fault {fault!r}; see --list-faults")
    output = _fmt(fmt, as_json)
    diagnosis = run_demo(
        fault,
        window=window,
        out=out,
        workdir=workdir,
        quiet=quiet or output is not ReportFormat.TEXT,
    )
    _emit(diagnosis, output)


StallAfterOpt = Annotated[
    str,
    typer.Option(
        "--stall-after", help="No progress for this long is CRITICAL (e.g. 600, 10m, 1h)."
    ),
]
StateFileOpt = Annotated[
    Path,
    typer.Option("--state-file", help="Where the watchdog remembers the last progress markers."),
]
BundleDirOpt = Annotated[
    Path | None, typer.Option("--bundle-dir", help="On a new stall, write an evidence bundle here.")
]
KeepOpt = Annotated[int, typer.Option("--keep", min=1, help="Keep the last N stall bundles.")]
OnStallNativeOpt = Annotated[
    bool,
    typer.Option(
        "--on-stall-native", help="OPT-IN, touches the job: native stacks in the stall bundle."
    ),
]
OnStallFrOpt = Annotated[
    bool,
    typer.Option(
        "--on-stall-flight-recorder",
        help="OPT-IN, touches the job: poke the flight-recorder pipes for the stall bundle.",
    ),
]
OnStallExecOpt = Annotated[
    str | None,
    typer.Option(
        "--on-stall-exec", help="Run this shell command on a new stall, verdict JSON on stdin."
    ),
]
PromFileOpt = Annotated[
    Path | None, typer.Option("--prom-file", help="Prometheus textfile for node-exporter (atomic).")
]
LogFileOpt = Annotated[
    Path | None, typer.Option("--log-file", help="Append one JSON line per run.")
]


def _check_options(
    state_file: Path,
    stall_after: str,
    bundle_dir: Path | None,
    keep: int,
    on_stall_native: bool,
    on_stall_flight_recorder: bool,
    on_stall_exec: str | None,
    prom_file: Path | None,
    log_file: Path | None,
) -> CheckOptions:
    from slime_hangdoctor.watchdog.decide import parse_duration
    from slime_hangdoctor.watchdog.run import CheckOptions

    try:
        stall_s = parse_duration(stall_after)
    except ValueError as exc:
        raise HangDoctorError(str(exc)) from exc
    return CheckOptions(
        state_file=state_file,
        stall_after_s=stall_s,
        bundle_dir=bundle_dir,
        keep_bundles=keep,
        on_stall_native=on_stall_native,
        on_stall_flight_recorder=on_stall_flight_recorder,
        on_stall_exec=on_stall_exec,
        prom_file=prom_file,
        log_file=log_file,
    )


@app.command()
def check(
    address: AddressArg = None,
    stall_after: StallAfterOpt = "10m",
    state_file: StateFileOpt = DEFAULT_STATE_FILE,
    window: WindowOpt = WATCHDOG_DEFAULTS.window_s,
    timeout: TimeoutOpt = WATCHDOG_DEFAULTS.timeout_s,
    probe_timeout: ProbeTimeoutOpt = WATCHDOG_DEFAULTS.probe_timeout_s,
    local: LocalOpt = False,
    uid: UidOpt = None,
    bundle_dir: BundleDirOpt = None,
    keep: KeepOpt = 5,
    on_stall_native: OnStallNativeOpt = False,
    on_stall_flight_recorder: OnStallFrOpt = False,
    on_stall_exec: OnStallExecOpt = None,
    prom_file: PromFileOpt = None,
    log_file: LogFileOpt = None,
    api_key: ApiKeyOpt = None,
    ray_token: RayTokenOpt = None,
    sglang_url: SglangUrlOpt = None,
    router_url: RouterUrlOpt = None,
    ras_port: RasPortOpt = DEFAULTS.ras_port,
    fmt: FormatOpt = ReportFormat.TEXT,
    as_json: JsonOpt = False,
) -> None:
    """One watchdog run (for cron): exit 0 OK, 1 no progress yet below --stall-after, 2 stalled, 3 unknown."""
    from slime_hangdoctor.watchdog.run import run_check

    output = _fmt(fmt, as_json)
    opts = _options(
        window=window,
        timeout=timeout,
        probe_timeout=probe_timeout,
        api_key=api_key,
        ray_token=ray_token,
        sglang_url=sglang_url,
        router_url=router_url,
        local=local,
        uid=uid,
        ras_port=ras_port,
    )
    copts = _check_options(
        state_file,
        stall_after,
        bundle_dir,
        keep,
        on_stall_native,
        on_stall_flight_recorder,
        on_stall_exec,
        prom_file,
        log_file,
    )
    result = run_check(address, opts, copts)
    _emit(result.diagnosis, output, exit_code=int(result.exit_code))


@app.command()
def watch(
    address: AddressArg = None,
    interval: Annotated[
        float, typer.Option("--interval", min=1.0, help="Seconds between runs.")
    ] = 60.0,
    stall_after: StallAfterOpt = "10m",
    state_file: StateFileOpt = DEFAULT_STATE_FILE,
    window: WindowOpt = WATCHDOG_DEFAULTS.window_s,
    timeout: TimeoutOpt = WATCHDOG_DEFAULTS.timeout_s,
    probe_timeout: ProbeTimeoutOpt = WATCHDOG_DEFAULTS.probe_timeout_s,
    local: LocalOpt = False,
    uid: UidOpt = None,
    bundle_dir: BundleDirOpt = None,
    keep: KeepOpt = 5,
    on_stall_native: OnStallNativeOpt = False,
    on_stall_flight_recorder: OnStallFrOpt = False,
    on_stall_exec: OnStallExecOpt = None,
    prom_file: PromFileOpt = None,
    log_file: LogFileOpt = None,
    api_key: ApiKeyOpt = None,
    ray_token: RayTokenOpt = None,
    max_runs: Annotated[int | None, typer.Option("--max-runs", help="Stop after N runs.")] = None,
    sglang_url: SglangUrlOpt = None,
    router_url: RouterUrlOpt = None,
    ras_port: RasPortOpt = DEFAULTS.ras_port,
) -> None:
    """`check` in a loop every --interval seconds (for a systemd service); one status line per run."""
    from slime_hangdoctor.watchdog.run import CheckResult, watch_loop

    opts = _options(
        window=window,
        timeout=timeout,
        probe_timeout=probe_timeout,
        api_key=api_key,
        ray_token=ray_token,
        sglang_url=sglang_url,
        router_url=router_url,
        local=local,
        uid=uid,
        ras_port=ras_port,
    )
    copts = _check_options(
        state_file,
        stall_after,
        bundle_dir,
        keep,
        on_stall_native,
        on_stall_flight_recorder,
        on_stall_exec,
        prom_file,
        log_file,
    )

    def line(result: CheckResult) -> None:
        from slime_hangdoctor.render.printable import one_line

        v = result.diagnosis.verdict  # the summary and notes may quote the job: one line each
        typer.echo(
            f"{time.strftime('%Y-%m-%dT%H:%M:%S')} exit={int(result.exit_code)} status={v.status.value} "
            f"stage={v.stage.value} {one_line(v.summary)}",
        )
        for note in result.notes:
            typer.echo(f"  warning: {one_line(note)}", err=True)

    rc = watch_loop(address, opts, copts, interval_s=interval, max_runs=max_runs, on_result=line)
    raise typer.Exit(int(rc))


@app.command()
def version() -> None:
    """Print the version."""
    typer.echo(f"slime-hangdoctor {__version__}")


# ------------------------------------------------------------------ composition


def analyse_bundle(path: Path) -> Diagnosis:
    from slime_hangdoctor.pipeline import analyse_bundle as analyse_it

    return analyse_it(path).diagnosis


def run_attach(
    address: str | None,
    opts: CollectOptions,
    *,
    out: Path | None,
    quiet: bool,
    command: str = "attach",
) -> Diagnosis:
    """collect + analyse; the bundle is kept only with --out."""
    from slime_hangdoctor.pipeline import attach as attach_it

    with _progress(quiet) as say:
        return attach_it(address, opts, out=out, progress=say, command=command).diagnosis


DEMO_READY_TIMEOUT_S = 180.0  # a safety net for a busy machine, not the expected start-up time
DEMO_HELP = (
    "The demo job itself failed on this machine (nothing was diagnosed). It runs with this "
    "Python's packages; from the repository: python3 -m pip install -e '.[demo]'"
)
DEMO_RAY_HELP = (
    "The demo's local Ray head did not start (nothing was diagnosed); its log is named above. "
    "On a busy machine, try again when it is quieter."
)


def run_demo(
    fault: str, *, window: float, out: Path | None, workdir: Path | None, quiet: bool
) -> Diagnosis:
    from slime_hangdoctor.demo.cluster import ClusterError
    from slime_hangdoctor.demo.launch import DemoError, start_demo

    base = workdir or Path(tempfile.mkdtemp(prefix="hd-demo-"))
    with _progress(quiet) as say:
        say(f"starting a local Ray head for the demo job (fault: {fault})")
        try:
            run = start_demo(fault, workdir=base)
            try:
                run.wait_until_ready(timeout=DEMO_READY_TIMEOUT_S, progress=say)
            except BaseException:
                run.stop()
                raise
        except DemoError as exc:  # the demo's own failure, said in plain words
            raise HangDoctorError(f"the demo did not start: {exc}", help_text=DEMO_HELP) from None
        except ClusterError as exc:
            raise HangDoctorError(
                f"the demo did not start: {exc}", help_text=DEMO_RAY_HELP
            ) from None
    try:
        opts = CollectOptions(window_s=window, timeout_s=max(DEFAULTS.timeout_s, window + 15.0))
        return run_attach(run.head.dashboard_url, opts, out=out, quiet=quiet, command="demo")
    finally:
        run.stop()


# ------------------------------------------------------------------ output and errors


def _emit(diagnosis: Diagnosis, output: ReportFormat, exit_code: int | None = None) -> None:
    from rich.console import Console

    from slime_hangdoctor.render import render

    render(diagnosis, output, Console(soft_wrap=False))
    raise typer.Exit(int(diagnosis.verdict.exit_code) if exit_code is None else exit_code)


class _Progress:
    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet or not sys.stderr.isatty()
        self._status: Any = None  # rich's Status, imported only when shown

    def __enter__(self) -> Callable[[str], None]:
        if not self.quiet:
            from rich.console import Console

            self._status = Console(stderr=True).status("slime-hangdoctor: starting")
            self._status.__enter__()
        return self.say

    def say(self, msg: str) -> None:
        if self._status is not None:
            self._status.update(f"slime-hangdoctor: {msg}")

    def __exit__(self, *exc: object) -> None:
        if self._status is not None:
            self._status.__exit__(None, None, None)


def _progress(quiet: bool) -> _Progress:
    return _Progress(quiet)


def _err(msg: str, help_text: str = "") -> None:
    from rich.console import Console
    from rich.markup import escape

    from slime_hangdoctor.redact import redact_text
    from slime_hangdoctor.render.printable import printable

    console = Console(stderr=True)
    msg = escape(printable(redact_text(msg)))  # an address's user:password@ is never echoed
    console.print(f"[bold red]slime-hangdoctor:[/] {msg}", highlight=False, markup=True)
    if help_text:
        console.print(help_text, highlight=False, markup=False)


class _ClickError(Protocol):
    exit_code: int

    def format_message(self) -> str: ...


def _usage_errors() -> tuple[type[Exception], ...]:
    """click's exception type for usage errors: typer 0.2x raises the one of the click it vendors
    (`typer._click`), older typer the click package's. Both, where present."""
    import importlib

    found: list[type[Exception]] = []
    for module in ("typer._click.exceptions", "click.exceptions"):
        try:
            found.append(importlib.import_module(module).ClickException)
        except (ImportError, AttributeError):
            continue
    return tuple(found)


def main(argv: list[str] | None = None) -> int:
    """Entry point: maps every error to a message and an exit code (never a traceback)."""
    import os

    try:
        rc = app(args=argv, standalone_mode=False)
    except typer.Exit as exc:
        return int(exc.exit_code)
    except typer.Abort:
        _err("aborted")
        return int(ExitCode.UNKNOWN)
    except HangDoctorError as exc:
        _err(str(exc), exc.help_text)
        return exc.exit_code
    except KeyboardInterrupt:
        _err("interrupted")
        return int(ExitCode.UNKNOWN)
    except _usage_errors() as exc:  # bad option, missing argument, bad value
        usage = cast("_ClickError", exc)
        if usage.exit_code == 0:
            return 0
        _err(usage.format_message(), "Run `slime-hangdoctor --help` for the commands and options.")
        return int(ExitCode.UNKNOWN)
    except Exception as exc:  # noqa: BLE001 - the CLI boundary: a message, never a traceback
        if os.environ.get("SLIME_HANGDOCTOR_DEBUG"):
            raise
        _err(
            f"internal error: {type(exc).__name__}: {exc}",
            "This is a bug in slime-hangdoctor; set SLIME_HANGDOCTOR_DEBUG=1 for the traceback and report it.",
        )
        return int(ExitCode.UNKNOWN)
    return rc if isinstance(rc, int) else 0
