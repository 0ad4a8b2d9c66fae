"""The command line follows the conventions of its ecosystem (issue 42 item 7): `--version`/`-V`,
shell completion, option groups in `--help`, metavars that say what a value is, the report format
taken from `-o`'s suffix (a contradicting `--format` refused), `--bundle` (with `--out` its hidden
old name), and a bare `slime-hangdoctor` that prints its help. Each runs the real CLI in a process
of its own (the console script's way: `slime_hangdoctor.cli.main`), or parses in-process with the
commands' calls recorded (tests/fixtures/cli/record_cli.py), never collecting anything."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from slime_hangdoctor import __version__, cli
from tests.fixtures.cli import record_cli

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "bundles" / "gpu-2xh200-ray-nccl-hang"
MAIN = (
    "import sys; sys.argv[0] = 'slime-hangdoctor'; "
    "from slime_hangdoctor.cli import main; sys.exit(main(sys.argv[1:]))"
)


def _path() -> str:
    """The tree first, then the PYTHONPATH given (a typer under test, put there ahead of the
    environment's: `pip install --target DIR typer==X`)."""
    return os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)


def _run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in record_cli.ENV}
    return subprocess.run(
        [sys.executable, "-c", MAIN, *args],
        capture_output=True,
        text=True,
        env={**clean, "PYTHONPATH": _path(), "COLUMNS": "120", **env},
        cwd=ROOT,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version_flag_prints_the_version_and_exits_0(flag: str) -> None:
    done = _run(flag)
    assert (done.returncode, done.stdout) == (0, f"slime-hangdoctor {__version__}\n"), done


def test_a_bare_call_prints_the_help_and_exits_0() -> None:
    done = _run()
    assert done.returncode == 0, done
    assert "Usage: slime-hangdoctor [OPTIONS] COMMAND" in done.stdout
    for command in ("attach", "collect", "analyse", "demo", "check", "watch"):
        assert re.search(rf"^\W*{command}\s", done.stdout, re.M), command


def test_shell_completion_is_on() -> None:
    """`--show-completion bash` gives the script; the completion it calls names the commands and
    options (the hidden old name `--out` is not offered)."""
    script = _run("--show-completion", "bash")
    assert script.returncode == 0 and "_SLIME_HANGDOCTOR_COMPLETE=complete_bash" in script.stdout
    words = {"_SLIME_HANGDOCTOR_COMPLETE": "complete_bash", "COMP_CWORD": "1"}
    got = _run(**words, COMP_WORDS="slime-hangdoctor at")
    assert got.stdout.split() == ["attach"], got
    got = _run(**{**words, "COMP_CWORD": "2"}, COMP_WORDS="slime-hangdoctor attach --")
    offered = got.stdout.split()
    assert "--bundle" in offered and "--window" in offered and "--out" not in offered, offered


def _params(command: str) -> list[typer.core.TyperOption]:
    group = typer.main.get_command(cli.app)
    return list(group.commands[command].params)  # type: ignore[attr-defined]


def _panels(text: str) -> dict[str, str]:
    """rich's --help as {group title: the text of its box}."""
    found: dict[str, str] = {}
    title = None
    for line in text.splitlines():
        head = re.match(r"\s*╭─ (.+?) ─", line)
        if head:
            title = head.group(1)
            found[title] = ""
        elif line.strip().startswith("╰"):
            title = None
        elif title is not None:
            found[title] += line + "\n"
    return found


@pytest.mark.parametrize(
    ("command", "groups"),
    [
        ("attach", {cli.LOOK_PANEL: cli.LOOK, cli.TOUCH_PANEL: cli.TOUCH, cli.OUTPUT_PANEL: (*cli.BUNDLE[:1], cli.QUIET, *cli.REPORT, cli.REPORT_FILE)}),
        ("check", {cli.LOOK_PANEL: cli.LOOK, cli.WATCHDOG_PANEL: cli.STALL, cli.OUTPUT_PANEL: cli.REPORT}),
        ("watch", {cli.LOOK_PANEL: cli.LOOK, cli.WATCHDOG_PANEL: cli.STALL}),
    ],
)  # fmt: skip
def test_help_shows_the_options_in_their_groups(
    command: str, groups: dict[str, tuple[cli.Shared, ...]]
) -> None:
    """`--help` (rich's layout) has a box per group, and every option of the group is in it."""
    done = _run(command, "--help", COLUMNS="160")
    assert done.returncode == 0, done
    panels = _panels(done.stdout)
    flags = {p.name: p.opts[0] for p in _params(command)}
    for title, options in groups.items():
        assert title in panels, (title, list(panels))
        for option in options:
            flag = flags[option.name]
            assert re.search(rf"{re.escape(flag)}\b", panels[title]), (title, flag)
    if command == "watch":
        assert "--interval" in panels[cli.WATCHDOG_PANEL]


@pytest.mark.parametrize("command", [c for c in record_cli.COMMANDS if c])
def test_metavars_say_what_a_value_is(command: str) -> None:
    """No click type names (`<float range>`, `<str>`, `<path>`) where an option's value goes:
    SECONDS, DURATION, KEY, PATH, DIR... (the plain layout, and rich's option groups). An
    argument's type shown beside its name (ADDRESS, BUNDLE) is typer's own: rich's Arguments box,
    and typer 0.29's plain one."""
    plain = _run(command, "--help", TYPER_USE_RICH="0").stdout.partition("\nOptions:\n")[2]
    rich = _panels(_run(command, "--help").stdout)
    rich.pop("Arguments", None)
    for text in (plain, *rich.values()):
        assert not re.search(r"<(float|int)( range)?>|<str>|<path>", text), (command, text)
    if command in ("check", "watch"):
        plain = _run(command, "--help", TYPER_USE_RICH="0").stdout
        for shown in ("--window SECONDS", "--stall-after DURATION", "--api-key KEY",
                      "--prom-file PATH"):  # fmt: skip
            assert shown in plain, shown


SUFFIXES = {
    ".html": "<!DOCTYPE html>",
    ".md": "## HUNG in",
    ".json": '{\n  "schema"',
    ".txt": "╭─ HUNG",
}


@pytest.mark.parametrize("suffix", [*SUFFIXES, ".log"])
def test_the_report_format_comes_from_the_files_suffix(tmp_path: Path, suffix: str) -> None:
    """`analyse B -o r.html` without --format writes the page (it wrote the text report into the
    .html file); a suffix that names no format keeps the default, text."""
    report = tmp_path / f"r{suffix}"
    done = _run("analyse", str(FIXTURE), "-o", str(report))
    assert done.returncode == 2, done
    assert report.read_text().startswith(SUFFIXES.get(suffix, "╭─ HUNG")), report.read_text()[:80]


@pytest.mark.parametrize(
    ("given", "name"),
    [(("-f", "text"), "r.html"), (("--json",), "r.md"), (("--format", "html"), "r.JSON")],
)
def test_a_format_that_contradicts_the_suffix_is_refused(
    tmp_path: Path, given: tuple[str, ...], name: str
) -> None:
    done = _run("analyse", str(FIXTURE), *given, "-o", str(tmp_path / name))
    assert done.returncode == 3, done
    assert "does not match -o" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not (tmp_path / name).exists()


def test_a_format_that_agrees_with_the_suffix_is_taken(tmp_path: Path) -> None:
    done = _run("analyse", str(FIXTURE), "-f", "json", "-o", str(tmp_path / "r.json"))
    assert done.returncode == 2 and json.loads((tmp_path / "r.json").read_text())["status"]


def _attach_bundle(*argv: str) -> tuple[int, list[object]]:
    parsed = record_cli.parse(["attach", *argv], {})
    return parsed["rc"], [
        c["kwargs"].get("out") for c in parsed["calls"] if c["call"] == "run_attach"
    ]


def test_bundle_is_the_option_and_out_its_hidden_old_name() -> None:
    """`--bundle DIR` keeps the bundle; `--out DIR` (the old name, hidden from --help) still does;
    both at once are refused (exit 3) before anything runs; collect without either is refused."""
    assert _attach_bundle("--bundle", "/tmp/hd/b") == (record_cli.REACHED, ["/tmp/hd/b"])
    assert _attach_bundle("--out", "/tmp/hd/o") == (record_cli.REACHED, ["/tmp/hd/o"])
    assert _attach_bundle() == (record_cli.REACHED, [None])
    assert _attach_bundle("--bundle", "/tmp/hd/b", "--out", "/tmp/hd/o") == (3, [])
    for argv in (["collect", "--bundle", "/tmp/hd/c"], ["collect", "--out", "/tmp/hd/c"]):
        calls = record_cli.parse(argv, {})["calls"]
        assert [c["args"][2] for c in calls if c["call"] == "collect"] == ["/tmp/hd/c"], argv
    assert record_cli.parse(["collect"], {}) == {
        "argv": ["collect"],
        "env": {},
        "rc": 3,
        "calls": [],
    }
    for command in ("attach", "collect", "demo"):
        text = _run(command, "--help", TYPER_USE_RICH="0").stdout
        assert "--bundle DIR" in text and not re.search(r"--out\b", text), command


def test_no_help_text_is_taken_for_rich_markup() -> None:
    """--help is laid out by rich with markup on (for its groups): a help text with `[...]` in it
    would lose that part. Every command's and option's text reads the same once rendered."""
    from rich.markup import render

    group = typer.main.get_command(cli.app)
    texts = [group.help or ""]
    for command in group.commands.values():  # type: ignore[attr-defined]
        texts += [command.help or "", *(p.help or "" for p in command.params)]
    assert all(render(t).plain == t for t in texts), [t for t in texts if render(t).plain != t]
