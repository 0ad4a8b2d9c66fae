"""The command line's options, declared once (issue 23): the same options, help, defaults and exit
codes as before, and defaults that come from the defaults objects alone.

The expectations of the first three tests are the CLI as it was before its options were declared
once: tests/fixtures/cli/recorded.json, written by tests/fixtures/cli/record_cli.py on the code of
commit a4386ef (provenance in tests/fixtures/README.md). Each test replays the same capture on
today's CLI. What changed on purpose: the order in which a command lists its options (the shared
ones now come in the same groups, in the same order, in every command), the changes named below
(`_recorded_params`: issue 37's html and -o, issue 35's --layout, issue 42's metavars, --format's
default and --bundle), and the options added since (`ADDED`), which the replay leaves out (their
default changes no call). The help section of the capture was recorded again after issue 42 item 7
(`record_cli.py recorded.json --help-only`, click's plain layout); its parameters and command lines
are the capture of a4386ef, and the lines written with `--out` parse as they did.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any

import pytest
import typer

from tests.fixtures.cli import record_cli

ROOT = Path(__file__).resolve().parents[2]
RECORDED: dict[str, Any] = json.loads((ROOT / "tests/fixtures/cli/recorded.json").read_text())

# What changed on purpose since the capture of the parameters, and nothing else: the `html` report
# format (issue 37: every command with --format); `-o/--output FILE` on attach and analyse (issue
# 37); then issue 42 item 7: metavars that say what a value is, --format's default taken from -o's
# suffix, and `--out` renamed `--bundle` (the old name kept as a hidden alias).
HTML_ADDED_TO = ("attach", "analyse", "check", "demo")
OUTPUT_ADDED_TO = ("attach", "analyse")
OUTPUT_HELP = (
    "Write the report to this file instead of standard output, in the format its suffix names "
    "(.html: one self-contained page)."
)
FORMAT_HELP = "Output format (default: the one -o's suffix names, .txt .json .md .html; else text)."
OUTPUT_PARAM: dict[str, Any] = {
    "kind": "TyperOption",
    "type": ["TyperPath", {}],
    "name": "report_file",
    "opts": ["--output", "-o"],
    "secondary_opts": [],
    "required": False,
    "multiple": False,
    "default": None,
    "envvar": None,
    "help": OUTPUT_HELP,
    "is_flag": False,
    "flag_value": None,
    "show_default": False,
    "show_envvar": True,
    "hidden": False,
    "metavar": "PATH",
    "nargs": 1,
}
METAVARS = {
    "address": "ADDRESS", "bundle": "BUNDLE", "window": "SECONDS", "timeout": "SECONDS",
    "probe_timeout": "SECONDS", "interval": "SECONDS", "stall_after": "DURATION", "api_key": "KEY",
    "ray_token": "TOKEN", "uid": "UID", "ras_port": "PORT", "sglang_url": "URL",
    "router_url": "URL", "keep": "N", "max_runs": "N", "on_stall_exec": "COMMAND",
    "state_file": "PATH", "prom_file": "PATH", "log_file": "PATH", "bundle_dir": "DIR",
    "workdir": "DIR", "fault": "NAME", "out": "DIR",
}  # fmt: skip
# issue 35 item 6: the demo job's source layout (in the help recorded again since)
LAYOUT_PARAM: dict[str, Any] = {
    "kind": "TyperOption",
    "type": ["StringParamType", {}],
    "name": "layout",
    "opts": ["--layout"],
    "secondary_opts": [],
    "required": False,
    "multiple": False,
    "default": None,
    "envvar": None,
    "help": "The demo job's source layout: slime (slime main), miles (radixark/miles main: its "
    "files, its weight-update sessions) or slime-next (slime's open work: a ServingCluster actor "
    "starts the router and engines). Default: the fault's own, else slime.",
    "is_flag": False,
    "flag_value": None,
    "show_default": True,
    "show_envvar": True,
    "hidden": False,
    "metavar": "NAME",
    "nargs": 1,
}
COLLECT_BUNDLE_HELP = "Directory to write the evidence bundle into (required)."


def _bundle_renamed(out: dict[str, Any], command: str) -> list[dict[str, Any]]:
    """The recorded `--out DIR` as it is now: `--bundle DIR`, and `--out` its hidden old name
    (optional on collect too: the command asks for one of them)."""
    text = COLLECT_BUNDLE_HELP if command == "collect" else out["help"]
    bundle = {**out, "name": "bundle", "opts": ["--bundle"], "help": text, "required": False}
    alias = {**out, "help": f"Old name of --bundle. {text}", "hidden": True, "required": False}
    return [bundle, alias]


def _recorded_params(command: str) -> list[dict[str, Any]]:
    """The recorded parameters of `command`, with the changes above."""
    params: list[dict[str, Any]] = []
    for p in json.loads(json.dumps(RECORDED["params"][command])):
        p["metavar"] = METAVARS.get(p["name"], p["metavar"])
        if p["name"] == "fmt":
            p.update(default=None, help=FORMAT_HELP, show_default=False)
            if command in HTML_ADDED_TO:
                p["type"][1]["choices"] = [*p["type"][1]["choices"], "html"]
        params.extend(_bundle_renamed(p, command) if p["name"] == "out" else [p])
    if command in OUTPUT_ADDED_TO:
        params.append(OUTPUT_PARAM)
    if command == "demo":
        params.append(LAYOUT_PARAM)
    return params


# Options added since the recording: (command, parameter) -> (its flag, why). Its default (None)
# hands nothing new on.
ADDED: dict[tuple[str, str], tuple[str, str]] = {
    **{
        (command, "brief"): ("--brief", "issue 42 item 1: the one-screen report")
        for command in ("attach", "analyse", "check")
    },
    ("check", "expect_job"): ("--expect-job", "issue 43 item 4: no job found is UNKNOWN"),
    ("watch", "expect_job"): ("--expect-job", "issue 43 item 4: no job found is UNKNOWN"),
    ("demo", "tp"): ("--tp", "issue 45 item 1: TP ranks per demo engine"),
}
# Arguments a command's call gained since the capture, at their default (None) in every recorded
# line: `layout` (issue 35 item 6, run_demo).
CALLS_ADDED = {"layout", "tp"}


def _by_name(params: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in params}


def test_every_command_keeps_its_parameters() -> None:
    """Every command has the parameters it had, each with the same flags, help, default, env var,
    type and limits (as click sees them; the order of the options aside)."""
    now = record_cli.params()
    assert sorted(now) == sorted(RECORDED["params"])
    for command in RECORDED["params"]:
        kept = [p for p in now[command] if (command, p["name"]) not in ADDED]
        assert _by_name(kept) == _by_name(_recorded_params(command)), command
    for (command, name), (flag, _why) in ADDED.items():
        assert flag in _by_name(now[command])[name]["opts"], (command, name)


def _without_added(command: str, text: str) -> str:
    """--help without the entries of the options added since the recording (ADDED)."""
    flags = [flag for (cmd, _n), (flag, _w) in ADDED.items() if cmd == command]
    out: list[str] = []
    skipping = False
    for line in text.splitlines():
        if line.startswith("  -"):
            skipping = any(line.split()[0] == flag for flag in flags)
        if not skipping:
            out.append(line)
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


def _help_parts(text: str) -> tuple[str, set[str]]:
    """--help as (everything before the options, the set of option entries), each without any
    whitespace: where click wraps a line depends on the column's width, not on what it says. An
    argument's type beside its name (`ADDRESS <str>`: typer 0.29, not 0.28) is left out."""
    text = re.sub(r"(\n  [A-Z_]+) <\w+>", r"\1", text)  # typer 0.29 adds an argument's type
    head, _, options = text.partition("\nOptions:\n")
    head = "".join(head.split())
    entries: list[str] = []
    for line in options.splitlines():
        if line.startswith("  -"):
            entries.append("")
        if entries:
            entries[-1] += "".join(line.split())
    return head, set(entries)


@pytest.mark.parametrize("command", record_cli.COMMANDS)
def test_every_help_says_what_it_said(command: str) -> None:
    """`COLUMNS=200 slime-hangdoctor [CMD] --help` in click's plain layout (TYPER_USE_RICH=0: the
    same on every terminal): the same usage line, description, arguments and option entries as
    recorded (the help section of the capture was recorded again after issue 42 item 7)."""
    now = _without_added(command, record_cli.help_text(command))
    then = RECORDED["help"][command]
    if "\nOptions:\n" not in then:
        assert now == then
        return
    assert _help_parts(now) == _help_parts(then)


@pytest.mark.parametrize(
    "line", RECORDED["parsed"], ids=[" ".join(p["argv"]) for p in RECORDED["parsed"]]
)
def test_command_lines_parse_as_recorded(line: dict[str, Any]) -> None:
    """Each recorded command line gives the same exit code, and its command makes the same calls
    with the same CollectOptions, CheckOptions, address, report format, quiet and interval; refused
    lines (bad value, unknown option, bad duration) are refused before any call."""
    parsed = record_cli.parse(line["argv"], line["env"])
    for call in parsed.get("calls", []):
        for name in {n for _c, n in ADDED} | CALLS_ADDED:
            if call["kwargs"].get(name, "absent") in (None, False):  # its default: nothing said
                del call["kwargs"][name]
        if call["call"] == "_emit":  # the run's deadline (a clock, not an option) for the graph
            call["kwargs"].pop("deadline", None)
        if call["call"] == "_emit" and call["kwargs"] == {"to": None}:
            call["kwargs"] = {}  # -o not given: the report goes where it went before
        for arg in [*call["args"], *call["kwargs"].values()]:  # the CheckOptions handed on
            for name, default in CHECK_FIELDS_ADDED.items():
                if isinstance(arg, dict) and "state_file" in arg and arg.get(name) == default:
                    del arg[name]  # its default: the check behaves as recorded
    assert parsed == line


# CheckOptions fields added since the recording, with their defaults (issue 43 item 4)
CHECK_FIELDS_ADDED: dict[str, Any] = {"expect_job": False}


# Every default of the defaults objects changed: a command whose options show and take them all
# must follow. (Run in a child: the CLI reads the objects when it is imported.)
SHIFTED = """
import dataclasses, json
import slime_hangdoctor.collect.options as o

@dataclasses.dataclass(frozen=True)
class Shifted(o.CollectOptions):
    window_s: float = 4.5
    timeout_s: float = 33.0
    probe_timeout_s: float = 1.5
    native: bool = True
    health: bool = True
    health_generate: bool = True
    flight_recorder: bool = True
    local: bool = True
    uid: int | None = 4242
    ras_port: int = 4040
    api_key: str | None = "shifted-key"
    ray_token: str | None = "shifted-token"
    sglang_urls: tuple[str, ...] = ("http://e:1",)
    router_urls: tuple[str, ...] = ("http://r:2", "http://r:3")

o.CollectOptions = Shifted
o.WATCHDOG_DEFAULTS = Shifted(window_s=1.25, timeout_s=45.0, probe_timeout_s=0.75, ras_port=5050)
o.CHECK_DEFAULTS = o.CheckDefaults(stall_after_s=5400.0, keep_bundles=9, interval_s=17.0)

from tests.fixtures.cli import record_cli

lines = [["attach"], ["collect", "--out", "/tmp/hd/c"], ["check"], ["watch"], ["demo"]]
print(json.dumps({
    "params": record_cli.params(),
    "parsed": {line[0]: record_cli.parse(line, {})["calls"][0] for line in lines},
    "defaults": record_cli._plain(Shifted()),
    "watchdog": record_cli._plain(o.WATCHDOG_DEFAULTS),
    "check": record_cli._plain(o.CHECK_DEFAULTS),
}))
"""
# The options that show a field of the defaults objects, and that field (the test's own table).
COLLECT_FIELDS = {
    "window": "window_s",
    "timeout": "timeout_s",
    "probe_timeout": "probe_timeout_s",
    "native": "native",
    "health": "health",
    "health_generate": "health_generate",
    "flight_recorder": "flight_recorder",
    "local": "local",
    "uid": "uid",
    "ras_port": "ras_port",
    "api_key": "api_key",
    "ray_token": "ray_token",
    "sglang_url": "sglang_urls",
    "router_url": "router_urls",
}
CHECK_FIELDS = {"stall_after": "stall_after_s", "keep": "keep_bundles", "interval": "interval_s"}


def _shown(param: str, value: Any) -> Any:
    """A default as the option reads back: --stall-after's text as seconds."""
    from slime_hangdoctor.watchdog.decide import parse_duration

    return parse_duration(value) if param == "stall_after" else value


def test_every_default_comes_from_the_defaults_objects() -> None:
    """With every value of CollectOptions(), WATCHDOG_DEFAULTS and CHECK_DEFAULTS changed, every
    command shows and takes the new values: its options' defaults are the objects' fields, and a
    command line without options hands on exactly the defaults object (attach, collect, demo:
    CollectOptions(); check, watch: WATCHDOG_DEFAULTS and CHECK_DEFAULTS). Nothing is written twice."""
    # the repository first, then the caller's own path (a worktree's demo/ before an installed one)
    path = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    done = subprocess.run(
        [sys.executable, "-c", SHIFTED],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    got = json.loads(done.stdout)
    objects = {"attach": "defaults", "collect": "defaults", "demo": "defaults"}
    objects |= {"check": "watchdog", "watch": "watchdog"}
    seen = 0
    for command, source in objects.items():
        collect_defaults, check_defaults = got[source], got["check"]
        for param in got["params"][command]:
            name, default = param["name"], param["default"]
            if name in COLLECT_FIELDS:
                field = COLLECT_FIELDS[name]
                assert default == collect_defaults[field], (command, name)
                seen += 1
            elif name in CHECK_FIELDS and command in ("check", "watch"):
                assert _shown(name, default) == check_defaults[CHECK_FIELDS[name]], (command, name)
                seen += 1
    assert seen == 14 + 14 + 12 + 13 + 1  # attach, collect, check, watch (with --interval), demo
    calls = got["parsed"]
    for command in ("attach", "collect", "check", "watch"):
        assert calls[command]["args"][1] == got[objects[command]], command
    for command in ("check", "watch"):
        copts = calls[command]["args"][2]
        assert copts["stall_after_s"] == 5400.0 and copts["keep_bundles"] == 9
    assert calls["watch"]["kwargs"]["interval_s"] == 17.0
    assert calls["demo"]["kwargs"]["window"] == 4.5


def test_a_command_is_refused_where_its_options_do_not_add_up() -> None:
    """@takes refuses, when the command is defined, a shared option the command is not handed
    (its value would be lost) and a parameter that is no typer option (typer would make it a
    positional argument)."""
    from slime_hangdoctor import cli

    with pytest.raises(TypeError, match=r"not handed: \['local', 'window'\]"):

        @cli.takes(*cli.LOOK[:1], cli.LOOK[3])
        def lost(quiet: Annotated[bool, typer.Option("--quiet")] = False) -> None: ...

    with pytest.raises(TypeError, match="addr is no option"):

        @cli.takes(cli.ADDRESS)
        def typo(address: str | None, addr: str | None) -> None: ...


# ------------------------------------------------------------------ docs/cli.md

DOC = ROOT / "docs" / "cli.md"
DOC_HEAD = """# Command-line reference

Every command of `slime-hangdoctor` and every option it takes, with the value it takes and its
default (an empty default: off, or nothing). Options are listed by name; `--help` lists them in
groups (where to look, what touches the job, the watchdog, output), the group column here. Exit
codes: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN, also for bad arguments (docs/verdict.md). The opt-in
probes are explained in docs/probes.md, the watchdog's switches in docs/watchdog.md.

Conventions: `slime-hangdoctor --version` (`-V`) prints the version; a bare `slime-hangdoctor`
prints the help (exit 0); `--install-completion` / `--show-completion` set up shell completion
(bash, zsh, fish, PowerShell). `-o FILE` writes the report in the format its suffix names (`.txt`,
`.json`, `.md`, `.html`; any other suffix: text) unless `-f/--format` (or `--json`) says otherwise;
a `--format` that contradicts the suffix (`-f text -o r.html`) is refused with exit 3. A report
file is written as the other outputs are: a new private file (0600) renamed over the path; a
link, FIFO or device at the path is refused (exit 3) and the report printed instead. `--bundle DIR`
keeps the evidence bundle; `--out` is its old name, still taken (hidden from `--help`); giving
both is refused.

This page is generated from the command line itself:
`PYTHONPATH=$PWD python -m tests.unit.test_cli_options --write`; tests/unit/test_cli_options.py
fails when the two differ.
"""


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _default(param: Any) -> str:
    if param.required:
        return "(required)"
    if param.show_default is False or param.default is None or param.default is False:
        return ""
    value = param.default
    if isinstance(value, (list, tuple)):
        return " ".join(f"`{v}`" for v in value)
    return f"`{getattr(value, 'value', value)}`"


def cli_reference() -> str:
    """docs/cli.md, from the commands as typer builds them."""
    from slime_hangdoctor import cli

    out = [DOC_HEAD]
    group = typer.main.get_command(cli.app)
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        args = " ".join(
            f"[{p.name.upper()}]" if not p.required else p.name.upper()
            for p in command.params
            if not p.opts[0].startswith("-")
        )
        out.append(f"\n## `{name}`\n\n{_cell(command.help or '')}\n")
        out.append(f"\n`slime-hangdoctor {name} [OPTIONS]{' ' + args if args else ''}`\n")
        rows = [p for p in command.params if p.opts[0].startswith("-") and not p.hidden]
        if not rows:
            continue
        out.append(
            "\n| option | value | default | env | group | what it does |\n"
            "|---|---|---|---|---|---|\n"
        )
        for p in sorted(rows, key=lambda p: p.opts[-1].lstrip("-")):
            flags = ", ".join(f"`{o}`" for o in sorted(p.opts, key=len))
            choices = record_cli._type(p)[1].get("choices")
            value = f"`{p.metavar}`" if p.metavar else "\\|".join(f"`{c}`" for c in choices or ())
            env = f"`{p.envvar}`" if p.envvar else ""
            group = getattr(p, "rich_help_panel", None) or "Options"
            out.append(
                f"| {flags} | {value} | {_default(p)} | {env} | {group} | {_cell(p.help or '')} |\n"
            )
        for p in command.params:
            if not p.opts[0].startswith("-"):
                out.append(f"\n`{p.name.upper()}`: {_cell(p.help or '')}\n")
    return "".join(out)


def test_the_reference_page_is_the_command_line() -> None:
    """docs/cli.md lists every command and option with its default and help, as the CLI has them."""
    assert DOC.read_text() == cli_reference(), (
        "docs/cli.md differs from the command line: "
        "regenerate with `PYTHONPATH=$PWD python -m tests.unit.test_cli_options --write`"
    )


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m tests.unit.test_cli_options --write")
    DOC.write_text(cli_reference())
