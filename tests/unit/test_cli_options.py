"""The command line's options, declared once (issue 23): the same options, help, defaults and exit
codes as before, and defaults that come from the defaults objects alone.

The expectations of the first three tests are the CLI as it was before its options were declared
once: tests/fixtures/cli/recorded.json, written by tests/fixtures/cli/record_cli.py on the code of
commit a4386ef (provenance in tests/fixtures/README.md). Each test replays the same capture on
today's CLI. What changed on purpose: the order in which a command lists its options (the shared
ones now come in the same groups, in the same order, in every command), and the options added since
(`ADDED`), which the replay leaves out (their default changes no call).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any

import pytest
import typer

from tests.fixtures.cli import record_cli

ROOT = Path(__file__).resolve().parents[2]
RECORDED: dict[str, Any] = json.loads((ROOT / "tests/fixtures/cli/recorded.json").read_text())

# What was added on purpose since the capture, and nothing else (issue 37): the `html` report
# format (every command with --format), and `-o/--output FILE` on attach and analyse.
HTML_ADDED_TO = ("attach", "analyse", "check", "demo")
OUTPUT_ADDED_TO = ("attach", "analyse")
OUTPUT_HELP = (
    "Write the report to this file instead of standard output (with --format html: "
    "one self-contained page)."
)
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
    "metavar": None,
    "nargs": 1,
}


def _recorded_params(command: str) -> list[dict[str, Any]]:
    """The recorded parameters of `command`, with the additions above."""
    params = json.loads(json.dumps(RECORDED["params"][command]))
    for p in params:
        if p["name"] == "fmt" and command in HTML_ADDED_TO:
            p["type"][1]["choices"] = [*p["type"][1]["choices"], "html"]
    if command in OUTPUT_ADDED_TO:
        params.append(OUTPUT_PARAM)
    return list(params)


def _recorded_help(command: str) -> str:
    text: str = RECORDED["help"][command]
    if command in HTML_ADDED_TO:
        text = text.replace("<text|json|markdown>", "<text|json|markdown|html>")
    if command in OUTPUT_ADDED_TO:
        text = text.replace(
            "  --help ", f"  -o, --output <path>  {OUTPUT_HELP}\n  --help ", 1
        )
    return text


# Options added since the recording: (command, parameter) -> (its flag, why). Its default (None)
# hands nothing new on.
ADDED: dict[tuple[str, str], tuple[str, str]] = {
    ("demo", "layout"): ("--layout", "issue 35 item 6: the demo job's source layout"),
    ("check", "expect_job"): ("--expect-job", "issue 43 item 4: no job found is UNKNOWN"),
    ("watch", "expect_job"): ("--expect-job", "issue 43 item 4: no job found is UNKNOWN"),
}


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
    """--help as (everything before the options, the set of option entries). An entry is its
    lines joined without any whitespace: where click wraps a line depends on the option column's
    width, not on what the option says."""
    head, _, options = text.partition("\nOptions:\n")
    entries: list[str] = []
    for line in options.splitlines():
        if line.startswith("  -"):
            entries.append("")
        if entries:
            entries[-1] += "".join(line.split())
    return head, set(entries)


@pytest.mark.parametrize("command", record_cli.COMMANDS)
def test_every_help_says_what_it_said(command: str) -> None:
    """`COLUMNS=200 slime-hangdoctor [CMD] --help`: the same usage line, description and arguments,
    and the same option entries."""
    now = _without_added(command, record_cli.help_text(command))
    then = _recorded_help(command)
    if "\nOptions:\n" not in then:
        assert now == then
        return
    assert _help_parts(now) == _help_parts(then)
    if command not in OUTPUT_ADDED_TO:  # (the added option's lines: wrapped where click wraps)
        assert len(now.splitlines()) == len(then.splitlines())


@pytest.mark.parametrize(
    "line", RECORDED["parsed"], ids=[" ".join(p["argv"]) for p in RECORDED["parsed"]]
)
def test_command_lines_parse_as_recorded(line: dict[str, Any]) -> None:
    """Each recorded command line gives the same exit code, and its command makes the same calls
    with the same CollectOptions, CheckOptions, address, report format, quiet and interval; refused
    lines (bad value, unknown option, bad duration) are refused before any call."""
    parsed = record_cli.parse(line["argv"], line["env"])
    for call in parsed.get("calls", []):
        if call["call"] == "_emit" and call["kwargs"] == {"to": None}:
            call["kwargs"] = {}  # -o not given: the report goes where it went before
        for (_command, name), _added in ADDED.items():
            if call["kwargs"].get(name, "absent") is None:  # its default: nothing said
                del call["kwargs"][name]
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
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
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

Every command of `slime-hangdoctor` and every option it takes, with its default (an empty default:
off, or nothing). Options are listed by name; `--help` lists them in groups (where to look, what
touches the job, output). Exit codes: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN, also for bad arguments
(docs/verdict.md). The opt-in probes are explained in docs/probes.md, the watchdog's switches in
docs/watchdog.md.

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
        rows = [p for p in command.params if p.opts[0].startswith("-")]
        if not rows:
            continue
        out.append("\n| option | default | env | what it does |\n|---|---|---|---|\n")
        for p in sorted(rows, key=lambda p: p.opts[-1].lstrip("-")):
            flags = ", ".join(f"`{o}`" for o in sorted(p.opts, key=len))
            env = f"`{p.envvar}`" if p.envvar else ""
            out.append(f"| {flags} | {_default(p)} | {env} | {_cell(p.help or '')} |\n")
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
