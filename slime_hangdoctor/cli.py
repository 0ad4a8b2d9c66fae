"""The `slime-hangdoctor` command line: the only composer of collect, analysis and render."""

from __future__ import annotations

import sys
import tempfile
import time
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Annotated, Any

import typer

from slime_hangdoctor import __version__
from slime_hangdoctor.errors import HangDoctorError
from slime_hangdoctor.verdict import Diagnosis, ExitCode

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

FORMATS = ("text", "json", "markdown")

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
FormatOpt = Annotated[str, typer.Option("--format", "-f", help="Output: text, json or markdown.")]
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
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress display.")]


def _fmt(fmt: str, as_json: bool) -> str:
    fmt = "json" if as_json else fmt.lower()
    if fmt == "md":
        fmt = "markdown"
    if fmt not in FORMATS:
        raise HangDoctorError(f"unknown format {fmt!r}: choose one of {', '.join(FORMATS)}")
    return fmt


def _options(**kw: Any) -> Any:
    from slime_hangdoctor.collect.options import CollectOptions

    return CollectOptions(**kw)


# ------------------------------------------------------------------ commands


@app.command()
def attach(
    address: AddressArg = None,
    window: WindowOpt = 3.0,
    timeout: TimeoutOpt = 20.0,
    probe_timeout: ProbeTimeoutOpt = 2.0,
    fmt: FormatOpt = "text",
    as_json: JsonOpt = False,
    out: OutOpt = None,
    native: NativeOpt = False,
    health_generate: HealthGenOpt = False,
    flight_recorder: FlightOpt = False,
    api_key: ApiKeyOpt = None,
    ray_token: RayTokenOpt = None,
    sglang_url: SglangUrlOpt = None,
    router_url: RouterUrlOpt = None,
    local: LocalOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Diagnose a live slime job: discover, sample twice, analyse, report. Read-only by default."""
    output = _fmt(fmt, as_json)
    opts = _options(
        window_s=window,
        timeout_s=timeout,
        probe_timeout_s=probe_timeout,
        native=native,
        health_generate=health_generate,
        flight_recorder=flight_recorder,
        api_key=api_key,
        ray_token=ray_token,
        sglang_urls=tuple(sglang_url or ()),
        router_urls=tuple(router_url or ()),
        local=local,
    )
    diagnosis = run_attach(address, opts, out=out, quiet=quiet or output != "text")
    _emit(diagnosis, output)


@app.command()
def collect(
    out: Annotated[
        Path, typer.Option("--out", help="Directory to write the evidence bundle into.")
    ],
    address: AddressArg = None,
    window: WindowOpt = 3.0,
    timeout: TimeoutOpt = 20.0,
    probe_timeout: ProbeTimeoutOpt = 2.0,
    native: NativeOpt = False,
    health_generate: HealthGenOpt = False,
    flight_recorder: FlightOpt = False,
    api_key: ApiKeyOpt = None,
    ray_token: RayTokenOpt = None,
    sglang_url: SglangUrlOpt = None,
    router_url: RouterUrlOpt = None,
    local: LocalOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Write an evidence bundle (DIR and DIR.tar.gz) without analysing it."""
    from slime_hangdoctor.bundle import archive
    from slime_hangdoctor.collect.run import collect as do_collect

    opts = _options(
        window_s=window,
        timeout_s=timeout,
        probe_timeout_s=probe_timeout,
        native=native,
        health_generate=health_generate,
        flight_recorder=flight_recorder,
        api_key=api_key,
        ray_token=ray_token,
        sglang_urls=tuple(sglang_url or ()),
        router_urls=tuple(router_url or ()),
        local=local,
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
    fmt: FormatOpt = "text",
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
    window: WindowOpt = 3.0,
    fmt: FormatOpt = "text",
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
        fault, window=window, out=out, workdir=workdir, quiet=quiet or output != "text"
    )
    _emit(diagnosis, output)


@app.command()
def version() -> None:
    """Print the version."""
    typer.echo(f"slime-hangdoctor {__version__}")


# ------------------------------------------------------------------ composition


def analyse_bundle(path: Path) -> Diagnosis:
    from slime_hangdoctor.analysis.decide import diagnose
    from slime_hangdoctor.bundle import open_bundle
    from slime_hangdoctor.load import load_snapshot
    from slime_hangdoctor.topology import build_topology

    with open_bundle(path) as opened:
        snapshot = load_snapshot(opened)
    return diagnose(snapshot, build_topology(snapshot))


def run_attach(
    address: str | None, opts: Any, *, out: Path | None, quiet: bool, command: str = "attach"
) -> Diagnosis:
    """collect + analyse; the bundle is kept only with --out."""
    import dataclasses

    from slime_hangdoctor.bundle import archive
    from slime_hangdoctor.collect.run import collect as do_collect
    from slime_hangdoctor.verdict import unknown_verdict

    started = time.monotonic()
    tmp: AbstractContextManager[Any] = (
        tempfile.TemporaryDirectory(prefix="hangdoctor-") if out is None else nullcontext()
    )
    with tmp as tmpdir, _progress(quiet) as say:
        root = out if out is not None else Path(tmpdir) / "bundle"
        result = do_collect(address, opts, root, command=command, progress=say)
        if result.ray_error and not opts.local:
            verdict = unknown_verdict(
                f"Could not read the Ray cluster: {result.ray_error}",
                blind_spots=(result.ray_error,),
                elapsed_s=time.monotonic() - started,
            )
            return Diagnosis(verdict)
        diagnosis = analyse_bundle(result.root)
        if out is not None:
            archive(result.root)
    verdict = dataclasses.replace(diagnosis.verdict, elapsed_s=time.monotonic() - started)
    return dataclasses.replace(diagnosis, verdict=verdict)


def run_demo(
    fault: str, *, window: float, out: Path | None, workdir: Path | None, quiet: bool
) -> Diagnosis:
    from slime_hangdoctor.demo.launch import start_demo

    base = workdir or Path(tempfile.mkdtemp(prefix="hd-demo-"))
    with _progress(quiet) as say:
        say(f"starting a local Ray cluster and the demo job (fault: {fault})")
        run = start_demo(fault, workdir=base)
        try:
            say("waiting for the job to reach its fault")
            run.wait_until_ready(timeout=90.0)
        except BaseException:
            run.stop()
            raise
    try:
        opts = _options(window_s=window, timeout_s=max(20.0, window + 15.0))
        return run_attach(run.head.dashboard_url, opts, out=out, quiet=quiet, command="demo")
    finally:
        run.stop()


# ------------------------------------------------------------------ output and errors


def _emit(diagnosis: Diagnosis, output: str) -> None:
    from rich.console import Console

    from slime_hangdoctor.render import render

    render(diagnosis, output, Console(soft_wrap=False))
    raise typer.Exit(int(diagnosis.verdict.exit_code))


class _Progress:
    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet or not sys.stderr.isatty()
        self._status: Any = None

    def __enter__(self) -> Any:
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

    console = Console(stderr=True)
    console.print(f"[bold red]slime-hangdoctor:[/] {msg}", highlight=False, markup=True)
    if help_text:
        console.print(help_text, highlight=False, markup=False)


def main(argv: list[str] | None = None) -> int:
    """Entry point: maps every error to a message and an exit code (never a traceback)."""
    import click

    try:
        rc = app(args=argv, standalone_mode=False)
    except typer.Exit as exc:
        return int(exc.exit_code)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.UsageError as exc:
        _err(exc.format_message())
        return int(ExitCode.UNKNOWN)
    except click.Abort:
        _err("aborted")
        return int(ExitCode.UNKNOWN)
    except HangDoctorError as exc:
        _err(str(exc), exc.help_text)
        return exc.exit_code
    except KeyboardInterrupt:
        _err("interrupted")
        return int(ExitCode.UNKNOWN)
    return rc if isinstance(rc, int) else 0
