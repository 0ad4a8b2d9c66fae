"""NCCL RAS answers -> `RasReport` facts.

The `nccl_ras` artefact is `{"text": {"hello", "body", ...}, "json": {"hello", "body", ...}}`: the
raw answers of `VERBOSE STATUS` in text and in JSON format (either part may instead hold
`{"error": "..."}`). `parse_ras` prefers the JSON body and enriches it with what only the text says
(the group's Status/Errors columns and the per-communicator warning lines); it falls back to the
text body when the JSON is unusable.

NCCL 2.28.9 writes malformed JSON inside `missing_ranks` (no comma between `"nvml_dev": N` and
`"status"`). The JSON parser repairs missing commas between a value and the next key and then sets
`RasReport.repaired=True`.

No answer at all (both parts hold an error, e.g. "Connection refused" because no NCCL communicator
lives on that node) raises `ParseError` with the recorded reason: an empty report would claim that
RAS answered and saw no communicator, which is a different fact.

Communicator hashes are normalised to the JSON spelling `0x<hex>` (the text prints bare hex).
In the text form, communicators without a detail section appear as one entry per summary-table
group, with hash `#<group>` and no ranks. Pure: no I/O. Bad input raises `ParseError` only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal, get_args

from slime_hangdoctor.errors import ParseError
from slime_hangdoctor.parsers.json_text import json_field
from slime_hangdoctor.source_spec import SourceSpec

# the source's name: the `source` of its probe records, the folder of its artefacts under raw/
NCCL_RAS = "nccl_ras"  # JSON {"text": {...,"body"}, "json": {...,"body"}} of one node

__all__ = ["parse_ras", "parse_ras_json_body", "parse_ras_text_body"]

# A value (number, string, literal, object/array end) followed on the next line by a key, with
# no comma in between: the NCCL 2.28.9 bug. JSON strings cannot hold raw newlines, so a match can
# never be inside a string.
_MISSING_COMMA = re.compile(r'([0-9"}\]]|true|false|null)([ \t]*\r?\n[ \t\r\n]*)(?=")')


# --------------------------------------------------------------------------- envelope


# --------------------------------------------------------------------------- facts


@dataclass(frozen=True)
class RasRank:
    rank: int
    pid: int | None = None
    host: str | None = None
    cuda_dev: int | None = None
    nvml_dev: int | None = None
    collective_counts: Mapping[str, int] = field(default_factory=dict)
    missing: bool = False  # listed under missing_ranks
    considered_dead: bool | None = None
    launched_up_to: int | None = None  # text form: "has launched up to operation N"


@dataclass(frozen=True)
class RasCommunicator:
    hash: str
    size: int | None
    ranks: tuple[RasRank, ...]
    status: str | None = None  # as RAS printed it: RUNNING, INIT, ABORT ... (text form)
    errors: str | None = None  # as RAS printed it: OK, MISMATCH, INCOMPLETE, ERROR ...
    messages: tuple[str, ...] = ()  # the warning lines RAS printed for this communicator

    @property
    def states(self) -> frozenset[RasState]:
        """The states RAS printed, typed (a word it prints that NCCL 2.28 does not is UNKNOWN);
        none printed: RUNNING."""
        return _ras_words(self.status, RAS_STATES) or frozenset({RAS_RUNNING})

    @property
    def error_kinds(self) -> frozenset[RasError]:
        """The errors RAS printed, typed (OK: none; an unknown word is UNKNOWN)."""
        return _ras_words(self.errors, RAS_ERRORS) - {"OK"}


# NCCL RAS's words for a communicator (NCCL 2.28 src/ras/client_support.cc: rasACStatus,
# rasACError), as its text form prints them, comma-separated where several hold
RasState = Literal["NOCOMM", "INIT", "RUNNING", "FINALIZE", "ABORT", "UNKNOWN"]


RasError = Literal["OK", "MISMATCH", "ERROR", "INCOMPLETE", "UNKNOWN"]


RAS_STATES: Final[frozenset[str]] = frozenset(get_args(RasState))


RAS_ERRORS: Final[frozenset[str]] = frozenset(get_args(RasError))


RAS_RUNNING: Final[RasState] = "RUNNING"


RAS_MISMATCH: Final[RasError] = "MISMATCH"


# states of a communicator that works or is being set up
RAS_HEALTHY: Final[tuple[frozenset[RasState], ...]] = (frozenset({"RUNNING"}), frozenset({"INIT"}))


def _ras_words(text: str | None, known: frozenset[str]) -> frozenset[Any]:
    words = {w.strip().upper() for w in (text or "").replace(" ", ",").split(",") if w.strip()}
    return frozenset(w if w in known else "UNKNOWN" for w in words)


@dataclass(frozen=True)
class RasReport:
    communicators: tuple[RasCommunicator, ...]
    nccl_version: str | None = None
    source_format: str = "json"  # json | text
    repaired: bool = False  # NCCL 2.28.9's malformed JSON was repaired


def _loads_first(text: str, what: str) -> Any:
    """The first JSON value in `text`; trailing text (e.g. `time` output) is ignored."""
    try:
        value, _ = json.JSONDecoder().raw_decode(text.lstrip())
    except (ValueError, RecursionError) as exc:
        raise ParseError(f"{what}: not valid JSON ({exc})") from None
    return value


def _part(envelope: dict[str, Any], key: str) -> tuple[str | None, str | None]:
    """(body, error) of the `text` or `json` part."""
    part = envelope.get(key)
    if part is None:
        return None, None
    if not isinstance(part, dict):
        raise ParseError(f"NCCL RAS: the {key!r} part is {type(part).__name__}, not an object")
    body, error = part.get("body"), part.get("error")
    return (
        body if isinstance(body, str) else None,
        str(error) if error is not None else None,
    )


def parse_ras(text: str) -> RasReport:
    """Parse the `nccl_ras` artefact (see the module docstring for the rules)."""
    if not isinstance(text, str) or not text.strip():
        raise ParseError("NCCL RAS: empty artefact")
    envelope = _loads_first(text, "NCCL RAS artefact")
    if not isinstance(envelope, dict):
        raise ParseError("NCCL RAS: the artefact is not a JSON object")
    json_body, json_error = _part(envelope, "json")
    text_body, text_error = _part(envelope, "text")
    from_text = _try(parse_ras_text_body, text_body)
    from_json = _try(parse_ras_json_body, json_body)
    if isinstance(from_json, RasReport):
        return _merge(from_json, from_text) if isinstance(from_text, RasReport) else from_json
    if isinstance(from_text, RasReport):
        return from_text
    reasons = [r for r in (from_json, from_text, json_error, text_error) if isinstance(r, str)]
    if json_body is None and text_body is None and (json_error or text_error):
        raise ParseError(f"NCCL RAS did not answer: {json_error or text_error}")
    raise ParseError("NCCL RAS: no usable body (" + "; ".join(reasons or ["no body"]) + ")")


def _try(parser: Callable[[str], RasReport], body: str | None) -> RasReport | str | None:
    if body is None:
        return None
    try:
        return parser(body)
    except ParseError as exc:
        return str(exc)


def _merge(base: RasReport, text: RasReport) -> RasReport:
    """Add the text form's status, errors and messages to the JSON communicators.

    A communicator with a detail section in the text is matched by hash. The others belong to
    groups without detail sections (errors OK); one is matched to such a group when all groups of
    its size agree on status and errors.
    """
    by_hash = {c.hash: c for c in text.communicators if not c.hash.startswith("#")}
    groups = [c for c in text.communicators if c.hash.startswith("#")]
    comms = []
    for comm in base.communicators:
        extra = by_hash.get(comm.hash)
        if extra is None:
            labels = {(g.status, g.errors) for g in groups if g.size == comm.size}
            if len(labels) == 1:
                status, errors = labels.pop()
                comms.append(replace(comm, status=status, errors=errors))
            else:
                comms.append(comm)
            continue
        comms.append(
            replace(comm, status=extra.status, errors=extra.errors, messages=extra.messages)
        )
    return replace(
        base,
        communicators=tuple(comms),
        nccl_version=base.nccl_version or text.nccl_version,
    )


# --------------------------------------------------------------------------- JSON body


def _norm_hash(value: str) -> str:
    """`0x36735bf8be4c1f8` (JSON, `%lx`) and `036735bf8be4c1f8` (text, `%016lx`) -> one key."""
    raw = value.strip().lower()
    try:
        return f"0x{int(raw, 16):x}"
    except ValueError:
        return raw


def _opt_int(obj: dict[str, Any], key: str, what: str) -> int | None:
    return json_field(obj, key, int, f"NCCL RAS JSON: {what}")


def _as_object(raw: object, what: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise ParseError(f"NCCL RAS JSON: a {what} is {type(raw).__name__}, not an object")
    return raw


def _rank_common(raw: dict[str, Any], what: str) -> dict[str, Any]:
    rank = _opt_int(raw, "rank", what)
    if rank is None:
        raise ParseError(f"NCCL RAS JSON: a {what} has no 'rank'")
    pid = _opt_int(raw, "pid", what)
    host = raw.get("host")
    if host is not None and not isinstance(host, str):
        raise ParseError(f"NCCL RAS JSON: {what} 'host' is not a string")
    return {
        "rank": rank,
        "pid": pid if pid is not None and pid >= 0 else None,  # -1: RAS did not know
        "host": host if host and host != "unknown" else None,
        "cuda_dev": _opt_int(raw, "cuda_dev", what),
        "nvml_dev": _opt_int(raw, "nvml_dev", what),
    }


def _counts(value: object) -> dict[str, int]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ParseError("NCCL RAS JSON: 'collective_counts' is not an object")
    out: dict[str, int] = {}
    for op, count in value.items():
        if isinstance(count, bool) or not isinstance(count, int):
            raise ParseError(f"NCCL RAS JSON: collective count {op!r} is not an integer")
        out[str(op)] = count
    return out


def _json_rank(item: object) -> RasRank:
    raw = _as_object(item, "rank")
    common = _rank_common(raw, "rank")
    return RasRank(**common, collective_counts=_counts(raw.get("collective_counts")))


def _json_missing_rank(item: object) -> RasRank:
    raw = _as_object(item, "missing rank")
    common = _rank_common(raw, "missing rank")
    status = raw.get("status")
    dead = status.get("considered_dead") if isinstance(status, dict) else None
    return RasRank(**common, missing=True, considered_dead=dead if isinstance(dead, bool) else None)


def _list_of(raw: dict[str, Any], key: str) -> list[Any]:
    value = raw.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise ParseError(f"NCCL RAS JSON: {key!r} is not a list")
    return value


def _json_comm(item: object) -> RasCommunicator:
    raw = _as_object(item, "communicator")
    comm_hash = raw.get("hash")
    if not isinstance(comm_hash, str) or not comm_hash.strip():
        raise ParseError("NCCL RAS JSON: a communicator has no 'hash'")
    ranks = [_json_rank(r) for r in _list_of(raw, "ranks")]
    ranks += [_json_missing_rank(r) for r in _list_of(raw, "missing_ranks")]
    return RasCommunicator(
        hash=_norm_hash(comm_hash),
        size=_opt_int(raw, "size", "communicator"),
        ranks=tuple(sorted(ranks, key=lambda r: (r.rank, r.missing))),
    )


def _repair(body: str) -> str:
    return _MISSING_COMMA.sub(r"\1,\2", body)


def parse_ras_json_body(body: str) -> RasReport:
    """Parse the body of a `SET FORMAT json` + `VERBOSE STATUS` answer (repairing 2.28.9's JSON)."""
    if not isinstance(body, str) or not body.strip():
        raise ParseError("NCCL RAS JSON: empty body")
    repaired = False
    try:
        data = _loads_first(body, "NCCL RAS JSON body")
    except ParseError:
        fixed = _repair(body)
        if fixed == body:
            raise
        data = _loads_first(fixed, "NCCL RAS JSON body (after repairing missing commas)")
        repaired = True
    if not isinstance(data, dict) or "communicators" not in data:
        raise ParseError("NCCL RAS JSON: no 'communicators' in the body")
    comms = tuple(_json_comm(c) for c in _list_of(data, "communicators"))
    version = data.get("nccl_version")
    return RasReport(
        communicators=comms,
        nccl_version=version if isinstance(version, str) else None,
        source_format="json",
        repaired=repaired,
    )


# --------------------------------------------------------------------------- text body

# Numbers are bounded: int() refuses strings of more than 4300 digits (ValueError).
_VERSION = re.compile(r"^NCCL version (\S+)")
_TABLE_HEADER = re.compile(r"^Group\s+Comms\s+Nodes")
_TABLE_ROW = re.compile(
    r"^\s*(\d{1,19})\s+(\d{1,19})\s+(\d{1,19})\s+(\S+)\s+(\d{1,19})\s+(\d{1,19})\s+([A-Z]+)\s+([A-Z,]+)\s*$"
)
_SECTION = re.compile(r"^#(\d{1,19})-(\d{1,19}) \(([0-9a-fA-Fx]+)\) ([A-Z]+)\s*$")
_JOB_SECTION = re.compile(r"^(INCOMPLETE|DEAD|TIMEOUT)\s*$")
_GPU = r"GPU (?P<cuda>\d{1,19})(?: \(NVML (?P<nvml>\d{1,19})\))?"
_RANK_LINE = re.compile(
    r"^Rank (?P<rank>\d{1,19})(?P<what>.*?) -- (?:"
    + _GPU
    + r" managed by process (?P<pid>\d{1,19})"
    r"(?: on node (?P<host>\S*))?|\[process information not found\])\s*$"
)
_LAUNCHED = re.compile(r"has launched up to operation (\d{1,19})")
_GROUP_LAUNCHED = re.compile(
    r"^\d{1,19} ranks have (?:launched up to operation (\d{1,19})|not launched any)"
)
_DIFFERENT_COUNTS = re.compile(r"^Communicator ranks have different (\w+) operation counts")
_JOB_PROCESS = re.compile(r"^Process (\d{1,19}) on node (\S*) managing GPU")
_ERROR_ORDER = ("INCOMPLETE", "ERROR", "MISMATCH")


def _with_death(r: RasRank, dead_pids: set[int], unresponsive_pids: set[int]) -> RasRank:
    """A missing rank as RAS's job section names its process: dead (True) or unresponsive
    (False); unknown (None) where it names neither or the rank is not missing."""
    if not r.missing or r.pid is None:
        return r
    if r.pid in dead_pids:
        return replace(r, considered_dead=True)
    if r.pid in unresponsive_pids:
        return replace(r, considered_dead=False)
    return r


@dataclass
class _CommDraft:
    group: int
    hash: str
    kinds: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    ranks: dict[int, RasRank] = field(default_factory=dict)  # as read so far


@dataclass
class _Group:
    size: int
    status: str
    errors: str


class _TextRas:
    """Line-by-line reader of the text answer of `VERBOSE STATUS`."""

    def __init__(self) -> None:
        self.version: str | None = None
        self.groups: dict[int, _Group] = {}
        self.comms: dict[str, _CommDraft] = {}
        self.job_pids: dict[str, set[int]] = {"INCOMPLETE": set(), "DEAD": set()}
        self.in_table = False
        self.comm: _CommDraft | None = None
        self.job_kind: str | None = None
        self.op: str | None = None
        self.group_launched: int | None = None
        self.recognised = False

    def feed(self, raw_line: str) -> None:
        line = raw_line.rstrip()
        if not line.strip():
            self.in_table = False
            return
        if not line.startswith(" ") or self.in_table:
            self._top(line)
        else:
            self._detail(line.strip())

    def _top(self, line: str) -> None:
        version = _VERSION.match(line)
        if version is not None:
            self.version, self.recognised = version.group(1), True
            return
        if _TABLE_HEADER.match(line):
            self.in_table = self.recognised = True
            return
        row = _TABLE_ROW.match(line) if self.in_table else None
        if row is not None:
            self.groups[int(row.group(1))] = _Group(int(row.group(5)), row.group(7), row.group(8))
            return
        self.comm, self.job_kind, self.op, self.group_launched = None, None, None, None
        section = _SECTION.match(line)
        if section is not None:
            self._start_comm(section)
            return
        job = _JOB_SECTION.match(line)
        if job is not None:
            self.job_kind, self.recognised = job.group(1), True
        elif line.startswith("No communicator data collected"):
            self.recognised = True

    def _start_comm(self, section: re.Match[str]) -> None:
        comm_hash = _norm_hash(section.group(3))
        comm = self.comms.get(comm_hash)
        if comm is None:
            comm = _CommDraft(group=int(section.group(1)), hash=comm_hash)
            self.comms[comm_hash] = comm
        comm.kinds.append(section.group(4))
        self.comm, self.recognised = comm, True

    def _detail(self, text: str) -> None:
        if self.job_kind is not None:
            proc = _JOB_PROCESS.match(text)
            if proc is not None and self.job_kind in self.job_pids:
                self.job_pids[self.job_kind].add(int(proc.group(1)))
            return
        if self.comm is None:
            return
        self.comm.messages.append(text)
        different = _DIFFERENT_COUNTS.match(text)
        if different is not None:
            self.op, self.group_launched = different.group(1), None
            return
        grouped = _GROUP_LAUNCHED.match(text)
        if grouped is not None:
            self.group_launched = int(grouped.group(1) or 0)
            return
        rank_line = _RANK_LINE.match(text)
        if rank_line is not None:
            self._rank(self.comm, rank_line)

    def _rank(self, comm: _CommDraft, match: re.Match[str]) -> None:
        number = int(match.group("rank"))
        rank = comm.ranks.get(number) or RasRank(rank=number)
        if match.group("pid") is not None:
            cuda, nvml = int(match.group("cuda")), match.group("nvml")
            rank = replace(
                rank,
                pid=int(match.group("pid")),
                host=match.group("host") or rank.host,
                cuda_dev=cuda,
                nvml_dev=int(nvml) if nvml is not None else cuda,
            )
        kind = comm.kinds[-1] if comm.kinds else ""
        if kind == "INCOMPLETE":
            rank = replace(rank, missing=True)
        comm.ranks[number] = rank
        if kind != "MISMATCH" or self.op is None:
            return
        what = match.group("what")
        launched = _LAUNCHED.search(what)
        if launched is not None:
            count: int | None = int(launched.group(1))
        elif "has not launched any operations" in what:
            count = 0
        else:
            count = self.group_launched
        if count is not None:
            comm.ranks[number] = replace(
                rank,
                collective_counts={**rank.collective_counts, self.op: count},
                launched_up_to=count if rank.launched_up_to is None else rank.launched_up_to,
            )

    def report(self) -> RasReport:
        if not self.recognised:
            raise ParseError(
                "NCCL RAS text: not a RAS status answer (no version, table or section)"
            )
        comms = [self._build(c) for c in self.comms.values()]
        seen_groups = {c.group for c in self.comms.values()}
        for number, group in sorted(self.groups.items()):
            if number not in seen_groups:
                comms.append(
                    RasCommunicator(f"#{number}", group.size, (), group.status, group.errors)
                )
        return RasReport(
            communicators=tuple(comms), nccl_version=self.version, source_format="text"
        )

    def _build(self, comm: _CommDraft) -> RasCommunicator:
        group = self.groups.get(comm.group)
        errors = group.errors if group else ",".join(k for k in _ERROR_ORDER if k in comm.kinds)
        ranks = tuple(
            _with_death(r, self.job_pids["DEAD"], self.job_pids["INCOMPLETE"])
            for _, r in sorted(comm.ranks.items())
        )
        return RasCommunicator(
            hash=comm.hash,
            size=group.size if group else None,
            ranks=ranks,
            status=group.status if group else None,
            errors=errors or None,
            messages=tuple(comm.messages),
        )


def parse_ras_text_body(body: str) -> RasReport:
    """Parse the body of a text-format `VERBOSE STATUS` answer."""
    if not isinstance(body, str) or not body.strip():
        raise ParseError("NCCL RAS text: empty body")
    reader = _TextRas()
    for line in body.splitlines():
        reader.feed(line)
    return reader.report()


# NCCL RAS of one node at one sample (collect/nccl_ras.py: 32 MiB a part, two parts).
SPEC = SourceSpec[RasReport](
    name=NCCL_RAS,
    parse=lambda data, rec: parse_ras(data.decode("utf-8", "replace")),
    max_bytes=64 * 1024 * 1024,
    partial=True,
    missing=(
        "no NCCL RAS answer (NCCL < 2.24, NCCL_RAS_ENABLE=0, no live communicator, or not "
        "probed): collective counts per rank unknown"
    ),
    node_probe="slime_hangdoctor.collect.nccl_ras",
    analysis="slime_hangdoctor.analysis.parts.ras",
)
