"""py-spy dumps -> `ProcessStack` facts.

Two forms are read:

- `parse_pyspy_json`: stdout of `py-spy dump --json` (a JSON list of threads). Best for parsing.
- `parse_pyspy_text`: the plain text form (`py-spy dump`, `--native`, `--locals`, Ray's
  `/worker/traceback` answer, `ray stack`, and files that concatenate several dumps separated by
  `== ...` lines). Lines outside a `Process N: ...` block are ignored, so headers, warnings and
  py-spy error text between dumps do no harm.

Frames are innermost first, as py-spy prints them. Native frames (`--native`: `pthread_cond_wait
(libc.so.6)`, `0x7fb8daea3f16 (libc.so.6)`, `sock_call_ex (socketmodule.c:921)`) carry
`Frame.native=True`; absurdly long C++ symbol names are cut to `MAX_NAME_CHARS`.

The text form prints only one thread id: the OS thread id when py-spy knows it (then
`thread_id == os_thread_id`), else the Python thread id in hex (then `os_thread_id is None`).
Pure: no I/O. Bad input raises `ParseError` and nothing else.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from slime_hangdoctor.bundle import ProbeRecord
from slime_hangdoctor.errors import ParseError
from slime_hangdoctor.facts import Frame
from slime_hangdoctor.parsers.json_text import json_field, meta_int
from slime_hangdoctor.source_spec import Facts, Join, SourceSpec

# the sources' names: the `source` of their probe records, the folders of their artefacts under raw/
PYSPY = "pyspy"  # py-spy dump stdout; meta: pid, format (json|text), native
DASHBOARD_TRACEBACK = "dashboard_traceback"  # Ray /worker/traceback text; meta: pid

__all__ = ["MAX_NAME_CHARS", "parse_pyspy_json", "parse_pyspy_text"]

MAX_NAME_CHARS = 300
_ELLIPSIS = "..."

# Numbers are bounded: int() refuses strings of more than 4300 digits (ValueError).
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_PROCESS = re.compile(r"^Process (\d{1,19}):\s?(.*)$")
_PYTHON = re.compile(r"^Python v(\S+)")
_THREAD = re.compile(r'^Thread (0[xX][0-9a-fA-F]{1,32}|\d{1,19}) \(([^)]*)\)(?::\s*"(.*)")?\s*$')
_FRAME = re.compile(r"^(?P<name>.*) \((?P<loc>[^()]*)\)$")
_LINE_SUFFIX = re.compile(r"^(?P<file>.*):(?P<line>\d{1,12})$")
_PY_SUFFIXES = (".py", ".pyw")


# --------------------------------------------------------------------------- shared helpers


# --------------------------------------------------------------------------- facts


@dataclass(frozen=True)
class ThreadStack:
    thread_id: int
    name: str | None
    active: bool
    owns_gil: bool
    frames: tuple[Frame, ...]
    os_thread_id: int | None = None


@dataclass(frozen=True)
class ProcessStack:
    pid: int
    threads: tuple[ThreadStack, ...]
    title: str | None = None  # "Process N: <title>" line of the text form
    python_version: str | None = None
    native: bool = False


def _clip_name(name: str) -> str:
    """Cut symbol names longer than MAX_NAME_CHARS (C++ templates can be kilobytes long)."""
    if len(name) <= MAX_NAME_CHARS:
        return name
    return name[: MAX_NAME_CHARS - len(_ELLIPSIS)] + _ELLIPSIS


def _is_python_file(filename: str) -> bool:
    """True for Python source locations: `x.py`, `<frozen importlib._bootstrap>`, `<string>`."""
    return filename.endswith(_PY_SUFFIXES) or filename.startswith("<")


# --------------------------------------------------------------------------- JSON form


def _json_int(obj: dict[str, Any], key: str, *, required: bool, what: str) -> int | None:
    return json_field(obj, key, int, f"py-spy JSON: {what}", required=required)


def _json_str(obj: dict[str, Any], key: str, *, required: bool, what: str) -> str | None:
    return json_field(obj, key, str, f"py-spy JSON: {what}", required=required)


def _json_bool(obj: dict[str, Any], key: str, *, default: bool | None, what: str) -> bool:
    found = json_field(obj, key, bool, f"py-spy JSON: {what}", required=default is None)
    return bool(default) if found is None else found


def _json_frame(raw: object) -> Frame:
    if not isinstance(raw, dict):
        raise ParseError(f"py-spy JSON: a frame is {type(raw).__name__}, not an object")
    name = _json_str(raw, "name", required=True, what="frame") or ""
    filename = _json_str(raw, "filename", required=True, what="frame") or ""
    short = _json_str(raw, "short_filename", required=False, what="frame") or ""
    line = _json_int(raw, "line", required=False, what="frame")
    module = raw.get("module")
    if module is not None and not isinstance(module, str):
        raise ParseError("py-spy JSON: frame 'module' is not a string")
    # py-spy sets `module` (the shared object) on native frames only; unresolved ones get '?'.
    native = bool(module) or not _is_python_file(short or filename)
    return Frame(
        name=_clip_name(name),
        filename=filename,
        line=line if line else None,  # py-spy writes 0 when it does not know the line
        short_filename=short,
        native=native,
    )


def _json_thread(raw: object) -> tuple[int | None, ThreadStack]:
    if not isinstance(raw, dict):
        raise ParseError(f"py-spy JSON: a thread is {type(raw).__name__}, not an object")
    frames_raw = raw.get("frames")
    if not isinstance(frames_raw, list):
        raise ParseError("py-spy JSON: a thread has no 'frames' list")
    thread = ThreadStack(
        thread_id=_json_int(raw, "thread_id", required=True, what="thread") or 0,
        name=_json_str(raw, "thread_name", required=False, what="thread"),
        active=_json_bool(raw, "active", default=None, what="thread"),
        owns_gil=_json_bool(raw, "owns_gil", default=False, what="thread"),
        frames=tuple(_json_frame(f) for f in frames_raw),
        os_thread_id=_json_int(raw, "os_thread_id", required=False, what="thread"),
    )
    return _json_int(raw, "pid", required=False, what="thread"), thread


def _choose_pid(pids: set[int], pid: int | None) -> int:
    if pid is not None:
        return pid
    if len(pids) == 1:
        return next(iter(pids))
    if not pids:
        raise ParseError("py-spy JSON: no thread names its pid and no pid was given")
    raise ParseError(f"py-spy JSON: threads of several processes {sorted(pids)}; pass pid=")


def parse_pyspy_json(text: str, pid: int | None = None) -> ProcessStack:
    """Parse the stdout of `py-spy dump --json` for one process.

    `pid` names the process when the dump has no threads (`[]`) or holds threads of several
    processes (then only that pid's threads are kept).
    """
    if not isinstance(text, str) or not text.strip():
        raise ParseError("py-spy JSON: empty output")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ParseError(f"py-spy JSON: not valid JSON ({exc})") from None
    if not isinstance(data, list):
        raise ParseError(f"py-spy JSON: top level is {type(data).__name__}, not a list of threads")
    pairs = [_json_thread(t) for t in data]
    if pid is not None:
        pairs = [(p, t) for p, t in pairs if p is None or p == pid]
        if data and not pairs:
            raise ParseError(f"py-spy JSON: no thread belongs to pid {pid}")
    chosen = _choose_pid({p for p, _ in pairs if p is not None}, pid)
    threads = tuple(t for _, t in pairs)
    native = any(f.native for t in threads for f in t.frames)
    return ProcessStack(pid=chosen, threads=threads, native=native)


# --------------------------------------------------------------------------- text form


@dataclass
class _ThreadDraft:
    thread_id: int
    os_thread_id: int | None
    name: str | None
    active: bool
    owns_gil: bool
    frames: list[Frame] = field(default_factory=list)

    def build(self) -> ThreadStack:
        return ThreadStack(
            thread_id=self.thread_id,
            name=self.name,
            active=self.active,
            owns_gil=self.owns_gil,
            frames=tuple(self.frames),
            os_thread_id=self.os_thread_id,
        )


@dataclass
class _ProcessDraft:
    pid: int
    title: str | None
    python_version: str | None = None
    threads: list[_ThreadDraft] = field(default_factory=list)

    def build(self) -> ProcessStack:
        threads = tuple(t.build() for t in self.threads)
        return ProcessStack(
            pid=self.pid,
            threads=threads,
            title=self.title,
            python_version=self.python_version,
            native=any(f.native for t in threads for f in t.frames),
        )


def _text_frame(body: str) -> Frame:
    """`name (file.py:12)`, `name (libc.so.6)`, `0x7f.. (libcuda.so)`, `f (socketmodule.c:921)`."""
    match = _FRAME.match(body)
    if match is None:
        return Frame(name=_clip_name(body), filename="", native=True)
    name, loc = match.group("name"), match.group("loc")
    line: int | None = None
    with_line = _LINE_SUFFIX.match(loc)
    if with_line is not None:
        loc, line = with_line.group("file"), int(with_line.group("line"))
    return Frame(
        name=_clip_name(name),
        filename=loc,
        line=line,
        short_filename=loc,
        native=not _is_python_file(loc),
    )


def _text_thread(match: re.Match[str]) -> _ThreadDraft:
    raw_id, state, name = match.group(1), match.group(2), match.group(3)
    is_hex = raw_id.lower().startswith("0x")
    ident = int(raw_id, 16) if is_hex else int(raw_id)
    flags = set(re.split(r"[+,\s]+", state.strip().lower()))
    return _ThreadDraft(
        thread_id=ident,
        os_thread_id=None if is_hex else ident,
        name=name,
        active="active" in flags,
        owns_gil="gil" in flags,
    )


class _TextReader:
    """Line-by-line state machine over one or more concatenated py-spy text dumps."""

    def __init__(self) -> None:
        self.done: list[_ProcessDraft] = []
        self.proc: _ProcessDraft | None = None
        self.thread: _ThreadDraft | None = None

    def close(self) -> None:
        if self.proc is not None:
            self.done.append(self.proc)
        self.proc, self.thread = None, None

    def feed(self, line: str) -> None:
        if not line.strip():
            return
        if line[0] in " \t":
            self._indented(line)
            return
        header = _PROCESS.match(line)
        if header is not None:
            self.close()
            title = header.group(2).strip() or None
            self.proc = _ProcessDraft(pid=int(header.group(1)), title=title)
            return
        if self.proc is None:
            return  # text between dumps: `== ...` markers, warnings, py-spy errors
        self._in_process(self.proc, line)

    def _in_process(self, proc: _ProcessDraft, line: str) -> None:
        version = _PYTHON.match(line)
        if version is not None and not proc.threads:
            proc.python_version = version.group(1)
            return
        thread = _THREAD.match(line)
        if thread is not None:
            self.thread = _text_thread(thread)
            proc.threads.append(self.thread)
            return
        self.close()  # anything else ends the dump (`== next`, `Error: ...`)

    def _indented(self, line: str) -> None:
        if self.thread is None:
            return
        expanded = line.expandtabs(4)
        indent = len(expanded) - len(expanded.lstrip(" "))
        if indent >= 8:
            return  # `--locals`: "Arguments:" / "Locals:" blocks
        self.thread.frames.append(_text_frame(expanded.strip()))


def parse_pyspy_text(text: str) -> tuple[ProcessStack, ...]:
    """Parse every `Process N: ...` dump in a py-spy text (plain or `--native`), in order.

    The same pid may appear more than once (e.g. a plain and a `--native` dump of one process).
    """
    if not isinstance(text, str) or not text.strip():
        raise ParseError("py-spy text: empty output")
    reader = _TextReader()
    for raw_line in _ANSI.sub("", text).splitlines():
        reader.feed(raw_line.rstrip("\r\n"))
    reader.close()
    if not reader.done:
        first = text.strip().splitlines()[0][:120]
        raise ParseError(f"py-spy text: no 'Process N:' dump found (starts with {first!r})")
    return tuple(p.build() for p in reader.done)


class StackVia(str, Enum):
    """Who read a stack: py-spy, or Ray's dashboard (/worker/traceback)."""

    PYSPY = "pyspy"
    DASHBOARD = "dashboard"


@dataclass(frozen=True)
class StackObs:
    """One process's stack at one sample, and who read it."""

    node_ip: str | None
    pid: int
    sample: int
    stack: ProcessStack
    via: StackVia = StackVia.PYSPY


def parse_record(data: bytes, rec: ProbeRecord) -> tuple[ProcessStack, ...]:
    """One dump: py-spy's JSON of one process (its pid from the record), or the text form (py-spy
    --native, Ray's /worker/traceback), which may hold several processes."""
    text = data.decode("utf-8", "replace")
    default = "text" if rec.source == DASHBOARD_TRACEBACK else "json"
    if rec.meta.get("format", default) == "json":
        return (parse_pyspy_json(text, meta_int(rec.meta.get("pid"))),)
    return parse_pyspy_text(text)


def _stacks(facts: Facts) -> tuple[StackObs, ...]:
    out: list[StackObs] = []
    for obs in facts.facts_of(SPEC, TRACEBACK_SPEC):
        via = StackVia.DASHBOARD if obs.source == DASHBOARD_TRACEBACK else StackVia.PYSPY
        out.extend(StackObs(obs.node_ip, stack.pid, obs.sample, stack, via) for stack in obs.fact)
    return tuple(out)


# py-spy's dump of one process (collect/pyspy.py); one text dump may hold several processes.
SPEC = SourceSpec[tuple[ProcessStack, ...]](
    name=PYSPY,
    parse=parse_record,
    max_bytes=16 * 1024 * 1024,
    node_probe="slime_hangdoctor.collect.pyspy",
    attaches=True,
    switch="stacks",
    analysis="slime_hangdoctor.analysis.parts.stacks",
)

# Ray's /worker/traceback of one process (collect/dashboard.py), where py-spy could not read it.
TRACEBACK_SPEC = SourceSpec[tuple[ProcessStack, ...]](
    name=DASHBOARD_TRACEBACK,
    parse=parse_record,
    max_bytes=16 * 1024 * 1024,
)


# Every stack of the bundle, py-spy's and the dashboard's, in the bundle's order.
ALL_STACKS = Join("stacks", _stacks)
