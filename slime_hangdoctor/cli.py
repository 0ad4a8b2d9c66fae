"""The `slime-hangdoctor` command line: the only composer of collect, analysis and render."""

from __future__ import annotations

import dataclasses
import inspect
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Annotated, Any, Protocol, cast, get_origin, get_type_hints

import typer

from slime_hangdoctor import __version__
from slime_hangdoctor.collect.options import (
    CHECK_DEFAULTS,
    WATCHDOG_DEFAULTS,
    CollectOptions,
    Deadline,
    from_process_start,
    mark_process_start,
)
from slime_hangdoctor.errors import HangDoctorError, UsageError
from slime_hangdoctor.verdict import Diagnosis, ExitCode, ReportFormat
from slime_hangdoctor.watchdog.state import DEFAULT_STATE_FILE

if TYPE_CHECKING:
    from slime_hangdoctor.watchdog.run import CheckOptions

app = typer.Typer(
    name="slime-hangdoctor",
    help="Tell, in seconds, why a slime RL training job has stopped making progress.\n\n"
    "Exit codes: 0 OK (progressing or idle), 1 WARNING (suspected stall), 2 CRITICAL (hung), "
    "3 UNKNOWN (could not diagnose, or bad arguments).",
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",  # the option groups of --help; no help text holds markup (a test says)
)

# ------------------------------------------------------------------ shared options, declared once
#
# Each option that several commands take is one `Shared` below: its parameter (name, flag, help,
# limits, metavar) and where its value goes: a field of the CollectOptions (`opts`) or CheckOptions
# (`copts`) the command is handed, the report format (`output`), or the command's own parameter of
# that name (`into` empty). The default it shows and takes is that field's value in the defaults
# object (CollectOptions() for attach, collect and demo; WATCHDOG_DEFAULTS and CHECK_DEFAULTS for
# check and watch), never a second literal here. The tuples (LOOK, TOUCH, STALL, REPORT, BUNDLE...)
# are also the groups `--help` shows them in (`_panel`). A command names the options it takes in `@takes(...)`;
# `_build` turns their values into those objects. A command's own option is an `Annotated`
# parameter of its signature, as typer reads it.
#
# To add an option to several commands: declare a `Shared` in its group's tuple (or beside it) and
# name it in each command's `@takes(...)`; with `into` empty, the command gets it as a parameter of
# the option's name.

DEFAULTS = CollectOptions()
_FROM_DEFAULTS: Any = object()  # a Shared's default: its field's value in the defaults object
_KW = inspect.Parameter.KEYWORD_ONLY
_ANNOTATED: Any = Annotated  # Annotated[type, info], of a type held in a variable

# The groups of `--help` (typer's rich_help_panel); a command's own options go under "Options".
LOOK_PANEL = "Where to look"
TOUCH_PANEL = "Touches the job (opt-in)"
WATCHDOG_PANEL = "Watchdog"
OUTPUT_PANEL = "Output"


def _same(value: Any) -> Any:
    return value


def _duration(text: str) -> float:
    from slime_hangdoctor.watchdog.decide import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise HangDoctorError(str(exc)) from exc


def _duration_text(seconds: float) -> str:
    """600.0 -> '10m': a duration as --stall-after is written (and `_duration` reads back)."""
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}"


def _urls(given: list[str] | None) -> tuple[str, ...]:
    return tuple(given or ())


def _urls_shown(urls: tuple[str, ...]) -> list[str] | None:
    return list(urls) or None


@dataclass(frozen=True)
class Shared:
    """One option of several commands, declared once: its parameter, and what its value fills."""

    name: str  # the parameter's name: typer hands the value under it
    type: Any  # the value's type
    info: Any  # typer.Option(...) or typer.Argument(...): flags, help, limits, metavar
    into: str = ""  # "opts", "copts" or "output"; "": handed to the command as `name`
    field: str = ""  # the field of `into` it sets (by default `name`)
    default: Any = _FROM_DEFAULTS  # or else the defaults object's value of `field`
    parse: Callable[[Any], Any] = _same  # the option's value as the field takes it
    show: Callable[[Any], Any] = _same  # the field's default as the option takes it
    alias_of: str = ""  # a hidden old name of the option `alias_of` (its value when that's unset)

    def parameter(self, defaults: object) -> inspect.Parameter:
        default = self.default
        if default is _FROM_DEFAULTS:
            default = self.show(getattr(defaults, self.field or self.name))
        kind = _ANNOTATED[self.type, self.info]
        return inspect.Parameter(self.name, _KW, default=default, annotation=kind)

    @property
    def target(self) -> str:
        """The command's parameter this option fills."""
        return self.into or self.alias_of or self.name


def _panel(panel: str, *options: Shared) -> tuple[Shared, ...]:
    """`options`, shown under `panel` in --help."""
    for option in options:
        option.info.rich_help_panel = panel
    return options


def _switch(name: str, kind: Any, info: Any) -> Shared:
    """A switch of the watchdog (the CheckOptions field `name`): off unless given (False, or None
    for one that takes a value), as CheckOptions and CheckDefaults say."""
    return Shared(name, kind, info, "copts", default=False if kind is bool else None)


def _also_probe(flag: str, field: str, what: str) -> Shared:
    """A repeatable `--<flag> URL` whose URLs fill the CollectOptions tuple `field`."""
    return Shared(
        flag.replace("-", "_"),
        list[str] | None,
        typer.Option(f"--{flag}", metavar="URL", help=f"Also probe this {what} (repeatable)."),
        "opts",
        field,
        parse=_urls,
        show=_urls_shown,
    )


ADDRESS = Shared(
    "address",
    str | None,
    typer.Argument(
        help="Ray address: 'auto' or nothing (RAY_ADDRESS, then the local cluster), 'host:6379' "
        "(GCS), or 'http://host:8265' (dashboard).",
        metavar="ADDRESS",
        show_default=False,
    ),
    default=None,
)


def _bundle_option(help_text: str) -> tuple[Shared, ...]:
    """--bundle DIR, and its old name --out (hidden: the command lines written for it still run)."""
    return _panel(
        OUTPUT_PANEL,
        Shared(
            "bundle",
            Path | None,
            typer.Option("--bundle", metavar="DIR", help=help_text),
            default=None,
        ),
        Shared(
            "out",
            Path | None,
            typer.Option(
                "--out", metavar="DIR", hidden=True, help=f"Old name of --bundle. {help_text}"
            ),
            default=None,
            alias_of="bundle",
        ),
    )


BUNDLE = _bundle_option(
    "Keep the evidence bundle in this directory (and DIR.tar.gz) for a bug report."
)
BUNDLE_TO_WRITE = _bundle_option("Directory to write the evidence bundle into (required).")
(QUIET,) = _panel(
    OUTPUT_PANEL,
    Shared(
        "quiet", bool, typer.Option("--quiet", "-q", help="No progress display."), default=False
    ),
)
# The report's format: `output` (with -o, also its file's suffix: `_output`).
REPORT = _panel(
    OUTPUT_PANEL,
    Shared(
        "fmt",
        ReportFormat | None,
        typer.Option(
            "--format",
            "-f",
            case_sensitive=False,
            help="Output format (default: the one -o's suffix names, .txt .json .md .html; else "
            "text).",
            show_default=False,
        ),
        "output",
        default=None,
    ),
    Shared(
        "as_json",
        bool,
        typer.Option("--json", help="Alias of --format json."),
        "output",
        default=False,
    ),
)
(BRIEF, REPORT_FILE) = _panel(
    OUTPUT_PANEL,
    Shared(
        "brief",
        bool,
        typer.Option(
            "--brief",
            help="One screen (24 lines at 100 columns): the verdict, the culprit and why, the top "
            "three next steps and the blind spots that could change the verdict (text or markdown).",
        ),
        default=False,
    ),
    Shared(
        "report_file",
        Path | None,
        typer.Option(
            "--output",
            "-o",
            metavar="PATH",
            help="Write the report to this file instead of standard output, in the format its "
            "suffix names (.html: one self-contained page).",
            show_default=False,
        ),
        default=None,
    ),
)
(WINDOW,) = _panel(
    LOOK_PANEL,
    Shared(
        "window",
        float,
        typer.Option(
            "--window",
            min=0.0,
            metavar="SECONDS",
            help="Seconds between the two samples that tell slow from hung.",
        ),
        "opts",
        "window_s",
    ),
)
# Where to look and for how long: options of every live command (attach, collect, check, watch).
LOOK = (
    WINDOW,
    *_panel(
        LOOK_PANEL,
        Shared(
            "timeout",
            float,
            typer.Option(
                "--timeout",
                min=1.0,
                metavar="SECONDS",
                help="Deadline for the whole run, in seconds.",
            ),
            "opts",
            "timeout_s",
        ),
        Shared(
            "probe_timeout",
            float,
            typer.Option(
                "--probe-timeout",
                min=0.1,
                metavar="SECONDS",
                help="Timeout of one probe (HTTP call, py-spy dump).",
            ),
            "opts",
            "probe_timeout_s",
        ),
        Shared(
            "local",
            bool,
            typer.Option(
                "--local",
                help="No Ray connection: find slime processes on this node by their titles.",
            ),
            "opts",
        ),
        Shared(
            "uid",
            int | None,
            typer.Option(
                "--uid",
                min=0,
                metavar="UID",
                help="With --local: take only this user's processes (default: the owner of the local Ray "
                "session, else the user running the doctor; a root doctor never takes other users').",
                show_default=False,
            ),
            "opts",
        ),
        Shared(
            "api_key",
            str | None,
            typer.Option(
                "--api-key",
                envvar="SGLANG_API_KEY",
                metavar="KEY",
                help="API key of SGLang servers started with one.",
            ),
            "opts",
        ),
        Shared(
            "ray_token",
            str | None,
            typer.Option(
                "--ray-token",
                envvar="RAY_AUTH_TOKEN",
                metavar="TOKEN",
                help="Token for Ray clusters with token auth.",
            ),
            "opts",
        ),
        _also_probe("sglang-url", "sglang_urls", "SGLang engine"),
        _also_probe("router-url", "router_urls", "SGLang router"),
        Shared(
            "ras_port",
            int,
            typer.Option(
                "--ras-port",
                min=1,
                max=65535,
                metavar="PORT",
                help="TCP port of NCCL's RAS service on 127.0.0.1 (NCCL_RAS_ADDR's port).",
            ),
            "opts",
        ),
    ),
)
# What touches the job: options of attach and collect only. The watchdog never touches the job on a
# routine look, and has its own --on-stall-* switches for a stall (STALL).
TOUCH = _panel(
    TOUCH_PANEL,
    Shared(
        "native",
        bool,
        typer.Option(
            "--native",
            help="OPT-IN, touches the job: py-spy --native stacks (C/C++ frames; pauses each target "
            "~0.2-1 s).",
        ),
        "opts",
    ),
    Shared(
        "health",
        bool,
        typer.Option(
            "--health",
            help="OPT-IN, touches the job: GET /health on engines. Since SGLang 0.4.10 it runs a "
            "1-token generation on an idle engine (unsafe on an offloaded colocate engine); default "
            "probes use /model_info, /server_info, /v1/loads and /metrics instead.",
        ),
        "opts",
    ),
    Shared(
        "health_generate",
        bool,
        typer.Option(
            "--health-generate",
            help="OPT-IN, touches the job: GET /health_generate on engines (runs a 1-token "
            "generation; never use on offloaded colocate engines).",
        ),
        "opts",
    ),
    Shared(
        "flight_recorder",
        bool,
        typer.Option(
            "--flight-recorder",
            help="OPT-IN, touches the job: write the TORCH_NCCL_DEBUG_INFO_PIPE_FILE pipes found in "
            "the ranks' environment so each rank dumps its PyTorch flight recorder, and read the "
            "dumps.",
        ),
        "opts",
    ),
)
# The watchdog's own settings (check, watch): `copts`, a CheckOptions.
STALL = _panel(
    WATCHDOG_PANEL,
    Shared(
        "stall_after",
        str,
        typer.Option(
            "--stall-after",
            metavar="DURATION",
            help="No progress for this long is CRITICAL (e.g. 600, 10m, 1h).",
        ),
        "copts",
        "stall_after_s",
        parse=_duration,
        show=_duration_text,
    ),
    Shared(
        "state_file",
        Path,
        typer.Option(
            "--state-file",
            metavar="PATH",
            help="Where the watchdog remembers the last progress markers.",
        ),
        "copts",
        default=DEFAULT_STATE_FILE,
    ),
    _switch(
        "bundle_dir",
        Path | None,
        typer.Option(
            "--bundle-dir", metavar="DIR", help="On a new stall, write an evidence bundle here."
        ),
    ),
    Shared(
        "keep",
        int,
        typer.Option("--keep", min=1, metavar="N", help="Keep the last N stall bundles."),
        "copts",
        "keep_bundles",
    ),
    _switch(
        "on_stall_native",
        bool,
        typer.Option(
            "--on-stall-native", help="OPT-IN, touches the job: native stacks in the stall bundle."
        ),
    ),
    _switch(
        "on_stall_flight_recorder",
        bool,
        typer.Option(
            "--on-stall-flight-recorder",
            help="OPT-IN, touches the job: poke the flight-recorder pipes for the stall bundle.",
        ),
    ),
    _switch(
        "on_stall_exec",
        str | None,
        typer.Option(
            "--on-stall-exec",
            metavar="COMMAND",
            help="Run this shell command on a new stall, verdict JSON on stdin.",
        ),
    ),
    _switch(
        "prom_file",
        Path | None,
        typer.Option(
            "--prom-file", metavar="PATH", help="Prometheus textfile for node-exporter (atomic)."
        ),
    ),
    _switch(
        "log_file",
        Path | None,
        typer.Option("--log-file", metavar="PATH", help="Append one JSON line per run."),
    ),
    _switch(
        "expect_job",
        bool,
        typer.Option(
            "--expect-job",
            envvar="SLIME_HANGDOCTOR_EXPECT_JOB",
            help="A job should run here: finding none is UNKNOWN (exit 3), not IDLE (exit 0).",
        ),
    ),
)


def _check_options(values: dict[str, Any]) -> CheckOptions:
    from slime_hangdoctor.watchdog.run import CheckOptions

    return CheckOptions(**values)


# A report file's suffix and the format it names (-o without --format).
SUFFIX_FORMATS = {
    ".txt": ReportFormat.TEXT,
    ".json": ReportFormat.JSON,
    ".md": ReportFormat.MARKDOWN,
    ".markdown": ReportFormat.MARKDOWN,
    ".html": ReportFormat.HTML,
    ".htm": ReportFormat.HTML,
}


def _output(values: dict[str, Any], to: Path | None) -> ReportFormat:
    """The report's format: --json or --format as given, else the one `to`'s suffix names, else
    text. A --format that contradicts the suffix is refused (a page of text named .html)."""
    given = ReportFormat.JSON if values["as_json"] else values["fmt"]
    named = SUFFIX_FORMATS.get(to.suffix.lower()) if to is not None else None
    if to is not None and given is not None and named is not None and given is not named:
        raise UsageError(
            f"--format {given.value} does not match -o {to}: a {to.suffix} file holds "
            f"{named.value}",
            help_text=f"Leave out --format (the suffix chooses), or name the file for "
            f"{given.value} ({', '.join(k for k, v in SUFFIX_FORMATS.items() if v is given)}).",
        )
    return given or named or ReportFormat.TEXT


def _build(
    shared: tuple[Shared, ...], collect_defaults: CollectOptions, given: dict[str, Any]
) -> dict[str, Any]:
    """The one place the command-line values become what a command is handed: the CollectOptions
    (`opts`: the defaults object with every option given set), the CheckOptions (`copts`), the
    report format (`output`), and the options handed as they are (address, bundle, quiet...)."""
    fields: dict[str, dict[str, Any]] = {}
    handed: dict[str, Any] = {}
    aliases: list[tuple[Shared, Any]] = []
    for option in shared:
        value = given.pop(option.name)
        if option.alias_of:
            aliases.append((option, value))
        elif option.into:
            fields.setdefault(option.into, {})[option.field or option.name] = option.parse(value)
        else:
            handed[option.name] = value
    for alias, value in aliases:
        if value is not None and handed[alias.alias_of] is not None:
            old, new = (f"--{n.replace('_', '-')}" for n in (alias.name, alias.alias_of))
            raise UsageError(f"{old} is the old name of {new}; give one of them")
        handed[alias.alias_of] = value if value is not None else handed[alias.alias_of]
    if "opts" in fields:
        handed["opts"] = dataclasses.replace(collect_defaults, **fields["opts"])
    if "copts" in fields:
        handed["copts"] = _check_options(fields["copts"])
    if "output" in fields:
        handed["output"] = _output(fields["output"], handed.get("report_file"))
    return handed


def takes(
    *shared: Shared, defaults: CollectOptions = DEFAULTS
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """A command taking the `shared` options, besides its own (typer parameters in its signature).

    The command declares what they fill, `opts`, `copts`, `output`, or the option's own name, and
    typer sees the shared options in their place: a group where its object is declared, in the
    order given here. `defaults` is the CollectOptions whose values are the `opts` options' defaults
    (CHECK_DEFAULTS is the `copts` options')."""

    def wrap(command: Callable[..., None]) -> Callable[..., None]:
        params: list[inspect.Parameter] = []
        own = _own_options(command, {s.target for s in shared})
        for param in inspect.signature(command).parameters.values():
            if param.name in own:
                params.append(param.replace(kind=_KW, annotation=own[param.name]))
            for option in (s for s in shared if s.target == param.name):
                params.append(
                    option.parameter(CHECK_DEFAULTS if option.into == "copts" else defaults)
                )
        missing = {s.name for s in shared} - {p.name for p in params}
        if missing:
            raise TypeError(f"{command.__name__} takes, but is not handed: {sorted(missing)}")

        def run(**given: Any) -> None:
            handed = _build(shared, defaults, given)
            command(**given, **handed)

        run.__name__, run.__qualname__ = command.__name__, command.__qualname__
        run.__doc__, run.__module__ = command.__doc__, command.__module__
        run.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in params}
        return run

    return wrap


def _own_options(command: Callable[..., None], shared: set[str]) -> dict[str, Any]:
    """The annotations of `command`'s own options (its parameters that no shared option fills),
    resolved as typer reads them; each must be an `Annotated[type, typer.Option/Argument]`."""
    names = [p for p in inspect.signature(command).parameters if p not in shared]
    written = {n: command.__annotations__[n] for n in names}  # (text: `from __future__`)
    kinds = get_type_hints(
        SimpleNamespace(__annotations__=written), command.__globals__, include_extras=True
    )
    for name, kind in kinds.items():
        if get_origin(kind) is not Annotated:
            raise TypeError(f"{command.__name__}: {name} is no option of typer's")
    return kinds


# ------------------------------------------------------------------ commands


def _show_version(shown: bool) -> None:
    if shown:
        typer.echo(f"slime-hangdoctor {__version__}")
        raise typer.Exit(0)


@app.callback(invoke_without_command=True)
def _main(
    ctx: typer.Context,
    version: Annotated[
        bool | None,
        typer.Option(
            "--version",
            "-V",
            callback=_show_version,
            is_eager=True,
            help="Print the version and exit.",
        ),
    ] = None,
) -> None:
    # (no docstring: the app's help is the Typer's)
    if ctx.invoked_subcommand is None:  # a bare `slime-hangdoctor`: its help, exit 0
        typer.echo(ctx.get_help())
        raise typer.Exit(0)


@app.command()
@takes(ADDRESS, *LOOK, *TOUCH, *BUNDLE, QUIET, *REPORT, BRIEF, REPORT_FILE)
def attach(
    address: str | None,
    opts: CollectOptions,
    bundle: Path | None,
    quiet: bool,
    output: ReportFormat,
    brief: bool,
    report_file: Path | None,
) -> None:
    """Diagnose a live slime job: discover, sample twice, analyse, report. Read-only by default."""
    opts = from_process_start(opts)
    deadline = Deadline(opts.timeout_s)  # the run's: the report's graph is laid out within it
    diagnosis = run_attach(
        address, opts, out=bundle, quiet=quiet or output is not ReportFormat.TEXT
    )
    _emit(diagnosis, output, to=report_file, brief=brief, deadline=deadline)


@app.command()
@takes(ADDRESS, *LOOK, *TOUCH, *BUNDLE_TO_WRITE, QUIET)
def collect(
    bundle: Path | None,
    address: str | None,
    opts: CollectOptions,
    quiet: bool,
) -> None:
    """Write an evidence bundle (DIR and DIR.tar.gz) without analysing it."""
    from slime_hangdoctor.bundle import archive
    from slime_hangdoctor.collect.run import collect as do_collect

    if bundle is None:
        raise UsageError(
            "Missing option '--bundle' (the directory to write the bundle into).",
            help_text="Run `slime-hangdoctor collect --help` for its options.",
        )
    with _progress(quiet) as say:
        result = do_collect(
            address, from_process_start(opts), bundle, command="collect", progress=say
        )
    if result.ray_error is not None and not opts.local:
        _err(f"could not read the Ray cluster: {result.ray_error}", result.ray_error.help_text)
    tarball = archive(result.root)
    failed = sum(1 for p in result.manifest.probes if p.outcome.value != "ok")
    typer.echo(
        f"bundle: {result.root} ({len(result.manifest.probes)} probes, {failed} not ok, "
        f"{result.elapsed_s:.1f}s); archive: {tarball}"
    )


@app.command()
@takes(*REPORT, BRIEF, REPORT_FILE)
def analyse(
    bundle: Annotated[
        Path,
        typer.Argument(
            metavar="BUNDLE",
            help="A bundle directory or .tar.gz written by collect/attach/check.",
        ),
    ],
    output: ReportFormat,
    brief: bool,
    report_file: Path | None,
) -> None:
    """Analyse an evidence bundle offline (record once, report many)."""
    _emit(analyse_bundle(bundle), output, to=report_file, brief=brief)


@app.command()
@takes(WINDOW, *BUNDLE, QUIET, *REPORT)
def demo(
    fault: Annotated[
        str, typer.Option("--fault", metavar="NAME", help="Fault to inject (see --list-faults).")
    ] = "weight_sync_engine_missing",
    list_faults: Annotated[
        bool, typer.Option("--list-faults", help="List the faults and exit.")
    ] = False,
    *,
    opts: CollectOptions,
    bundle: Path | None,
    workdir: Annotated[
        Path | None,
        typer.Option(
            "--workdir", metavar="DIR", help="Where the demo's Ray cluster keeps its files."
        ),
    ] = None,
    layout: Annotated[
        str | None,
        typer.Option(
            "--layout",
            metavar="NAME",
            help="The demo job's source layout: slime (slime main), miles (radixark/miles main: "
            "its files, its weight-update sessions) or slime-next (slime's open work: a "
            "ServingCluster actor starts the router and engines). Default: the fault's own, "
            "else slime.",
        ),
    ] = None,
    tp: Annotated[
        int | None,
        typer.Option(
            "--tp",
            metavar="N",
            min=1,
            help="TP ranks per SGLang engine (sglang::scheduler_TP0..N-1 joined by gloo), as "
            "slime's --rollout-num-gpus-per-engine. Default: the fault's own (1 for most).",
        ),
    ] = None,
    quiet: bool,
    output: ReportFormat,
) -> None:
    """Start a local Ray cluster, run a small slime-shaped job with a fault, and diagnose it."""
    _need_demo()
    from slime_hangdoctor_demo.faults import FAULTS

    if list_faults:
        for name, spec in FAULTS.items():
            where = f" [--layout {spec.layout}]" if spec.layout else ""
            typer.echo(f"{name:32} {spec.description}{where}")
        return
    if fault not in FAULTS:
        raise HangDoctorError(f"unknown fault {fault!r}; see --list-faults")
    from slime_hangdoctor_demo.launch import DemoError, job_layout, tp_size_of

    try:
        job_layout(FAULTS[fault], layout)  # refused before anything starts
        tp_size_of(FAULTS[fault], tp)
    except DemoError as exc:
        raise HangDoctorError(str(exc)) from None
    diagnosis = run_demo(
        fault,
        window=opts.window_s,
        out=bundle,
        workdir=workdir,
        quiet=quiet or output is not ReportFormat.TEXT,
        layout=layout,
        tp=tp,
    )
    _emit(diagnosis, output)


@app.command()
@takes(ADDRESS, *STALL, *LOOK, *REPORT, BRIEF, defaults=WATCHDOG_DEFAULTS)
def check(
    address: str | None,
    copts: CheckOptions,
    opts: CollectOptions,
    output: ReportFormat,
    brief: bool,
) -> None:
    """One watchdog run (for cron): exit 0 OK, 1 no progress yet below --stall-after, 2 stalled, 3 unknown."""
    from slime_hangdoctor.watchdog.run import run_check

    opts = from_process_start(opts)
    deadline = Deadline(opts.timeout_s)
    result = run_check(address, opts, copts)
    _emit(result.diagnosis, output, exit_code=int(result.exit_code), brief=brief, deadline=deadline)


@app.command()
@takes(ADDRESS, *STALL, *LOOK, defaults=WATCHDOG_DEFAULTS)
def watch(
    address: str | None,
    interval: Annotated[
        float,
        typer.Option(
            "--interval",
            min=1.0,
            metavar="SECONDS",
            help="Seconds between runs.",
            rich_help_panel=WATCHDOG_PANEL,
        ),
    ] = CHECK_DEFAULTS.interval_s,
    max_runs: Annotated[
        int | None,
        typer.Option(
            "--max-runs", metavar="N", help="Stop after N runs.", rich_help_panel=WATCHDOG_PANEL
        ),
    ] = None,
    *,
    copts: CheckOptions,
    opts: CollectOptions,
) -> None:
    """`check` in a loop every --interval seconds (for a systemd service); one status line per run."""
    from slime_hangdoctor.watchdog.run import CheckResult, watch_loop

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
    """Print the version (as --version does)."""
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
    """collect + analyse; the bundle is kept only with --bundle."""
    from slime_hangdoctor.pipeline import attach as attach_it
    from slime_hangdoctor.pipeline import preload

    with _progress(quiet) as say:
        return attach_it(
            address,
            opts,
            out=out,
            progress=say,
            command=command,
            on_window=lambda: preload("rich.console", "slime_hangdoctor.render"),
        ).diagnosis


DEMO_READY_TIMEOUT_S = 180.0  # a safety net for a busy machine, not the expected start-up time
# The demo is a distribution of its own (demo/ in the repository: slime-hangdoctor-demo, the package
# slime_hangdoctor_demo), not in the doctor's wheel; this installs it, with the job's dependencies.
DEMO_INSTALL = "python3 -m pip install -e ./demo"
DEMO_PACKAGE = "slime_hangdoctor_demo"
DEMO_MISSING_HELP = (
    "The demo is a distribution of its own (slime-hangdoctor-demo, the demo/ folder of the "
    f"repository). Install it into this Python, from a checkout of the repository: {DEMO_INSTALL}"
)
DEMO_HELP = (
    "The demo job itself failed on this machine (nothing was diagnosed). It runs with this "
    f"Python's packages; from the repository: {DEMO_INSTALL}"
)
DEMO_RAY_HELP = (
    "The demo's local Ray head did not start (nothing was diagnosed); its log is named above. "
    "On a busy machine, try again when it is quieter."
)


def _need_demo() -> None:
    """The demo's distribution is importable here, or a message naming the command that installs it
    (looked up, not imported: the package's import is the caller's)."""
    from importlib.util import find_spec

    if find_spec(DEMO_PACKAGE) is None:
        raise HangDoctorError(
            f"the demo is not installed in this Python ({sys.executable})",
            help_text=DEMO_MISSING_HELP,
        )


def run_demo(
    fault: str,
    *,
    window: float,
    out: Path | None,
    workdir: Path | None,
    quiet: bool,
    layout: str | None = None,
    tp: int | None = None,
) -> Diagnosis:
    from slime_hangdoctor_demo.cluster import ClusterError
    from slime_hangdoctor_demo.launch import DemoError, start_demo

    base = workdir or Path(tempfile.mkdtemp(prefix="hd-demo-"))
    with _progress(quiet) as say:
        say(f"starting a local Ray head for the demo job (fault: {fault})")
        try:
            run = start_demo(fault, workdir=base, layout=layout, tp_size=tp)
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


def _emit(
    diagnosis: Diagnosis,
    output: ReportFormat,
    exit_code: int | None = None,
    to: Path | None = None,
    brief: bool = False,
    deadline: Deadline | None = None,
) -> None:
    """Print the report (or write it to `to`; `brief`: the one-screen report), then exit with the
    verdict's code. A report that cannot be written is printed instead (the verdict is never lost),
    then refused: exit 3. `deadline`: the run's, where it has one (the HTML graph's layout gets what
    is left of it)."""
    if brief:
        from slime_hangdoctor.render import check_brief

        check_brief(output)
    left = None if deadline is None else deadline.remaining()
    if to is not None:
        problem = _write_report(diagnosis, output, to, brief, left)
        if problem is None:
            typer.echo(f"report: {to}", err=True)
        else:
            _print_report(diagnosis, output, brief, left)
            raise problem
    else:
        _print_report(diagnosis, output, brief, left)
    raise typer.Exit(int(diagnosis.verdict.exit_code) if exit_code is None else exit_code)


def _print_report(
    diagnosis: Diagnosis,
    output: ReportFormat,
    brief: bool = False,
    time_left_s: float | None = None,
) -> None:
    if output == ReportFormat.JSON:  # plain ASCII text (json escapes the rest): no rich to load
        from slime_hangdoctor.render import render_json

        typer.echo(render_json(diagnosis))
    else:
        from rich.console import Console

        from slime_hangdoctor.render import render

        render(diagnosis, output, Console(soft_wrap=False), brief, time_left_s)


REPORT_MODE = 0o600  # the report quotes the job (stacks, commands): the caller's, as a bundle is
REPORT_REFUSED_HELP = (
    "The report was printed to standard output instead. Name a new file for -o, or a regular "
    "file of yours (it is replaced), in a directory that no other user may write to (sticky "
    "ones such as /tmp excepted)."
)


def _write_report(
    diagnosis: Diagnosis,
    output: ReportFormat,
    to: Path,
    brief: bool = False,
    time_left_s: float | None = None,
) -> HangDoctorError | None:
    """Write the report to `to` as every other output is written (safe_fs.replace_file: a new file
    beside it, renamed over it; a link, FIFO or device at `to` refused, never opened); why not.
    `time_left_s`: what is left of the run's deadline (the HTML graph's layout)."""
    from slime_hangdoctor.safe_fs import UnsafePath, replace_file

    if output == ReportFormat.TEXT:
        from io import StringIO

        from rich.console import Console

        from slime_hangdoctor.render import render

        buffer = StringIO()
        console = Console(file=buffer, width=100, no_color=True, soft_wrap=False)
        render(diagnosis, output, console, brief)
        text = buffer.getvalue()
    else:
        from slime_hangdoctor.render import render_text

        text = render_text(diagnosis, output, brief, time_left_s)
    data = text.encode("utf-8")
    try:
        replace_file(to, lambda fh: fh.write(data), mode=REPORT_MODE)
    except UnsafePath as exc:
        return HangDoctorError(f"report not written: {exc}", help_text=REPORT_REFUSED_HELP)
    except OSError as exc:
        return HangDoctorError(f"could not write the report to {to}: {exc.strerror or exc}")
    return None


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


def mark_program_start() -> None:
    """Called by the program's entry (__main__) alone: a one-shot run's --timeout then counts from
    the process's start (collect.options.from_process_start)."""
    mark_process_start()


def main(argv: list[str] | None = None) -> int:
    """Entry point: maps every error to a message and an exit code (never a traceback)."""
    import os

    try:
        rc = app(args=argv, prog_name="slime-hangdoctor", standalone_mode=False)
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
