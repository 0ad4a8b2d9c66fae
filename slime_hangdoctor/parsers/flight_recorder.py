"""PyTorch flight-recorder dumps (pickles) -> `FrDump` facts.

A rank's watchdog writes a pickle of plain containers: `{"version", "pg_config", "pg_status",
"comm_lib_version", "entries": [{"record_id", "pg_id", "process_group": (pg_name, desc),
"collective_seq_id", "profiling_name", "state", "frames": [{"name", "filename", "line"}],
"input_sizes", "is_p2p", ...}]}`. `pg_config` is keyed by pg_name, `pg_status` by str(pg_id)
(torch 2.13 include/torch/csrc/distributed/c10d/FlightRecorderDetail.hpp:455 and :483).

SECURITY: a pickle from a bundle is untrusted. Its opcodes are checked before it is loaded
(`safe_pickle.check_plain_pickle`: plain data only, memo indexes in order, dict keys whose hashes
cannot collide, a cap on the objects built), then it is read with a restricted `pickle.Unpickler`
whose `find_class` refuses every global and which has no `persistent_load`: only dicts, lists,
tuples, strings, bytes, numbers, booleans and None can be built, so no code can run. A pickle
that needs anything else raises `ParseError`. Nor can a small pickle build a huge structure: one
that shares an object many times (a "memo bomb": 215 bytes whose `str()` is gigabytes) is walked
under a node budget (proportional to its size) and a depth budget before anything reads it, and
only scalars are ever turned into text.

The rank is not inside the pickle: the caller passes it (from the probe's meta, or
`rank_from_dump_name` on the dump's file name). Frames are innermost first, as in the dump.
Pure: no I/O. Bad input raises `ParseError` and nothing else.
"""

from __future__ import annotations

import io
import pickle
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, NoReturn, TypeVar, get_args

from slime_hangdoctor.bundle import FLIGHT_RECORDER, ProbeRecord
from slime_hangdoctor.errors import ParseError
from slime_hangdoctor.facts import Frame
from slime_hangdoctor.parsers.safe_pickle import check_plain_pickle
from slime_hangdoctor.source_spec import SourceSpec

__all__ = ["parse_flight_recorder", "rank_from_dump_name"]

_RANK_IN_NAME = re.compile(r"rank[_\-.]?(\d+)", re.IGNORECASE)
_TRAILING_NUMBER = re.compile(r"(\d+)$")
_DUMP_SUFFIXES = (".pkl", ".pickle", ".bin", ".json")
_PACKAGE_DIRS = ("site-packages/", "dist-packages/")


# --------------------------------------------------------------------------- facts


# a flight-recorder entry's state (torch/csrc/distributed/c10d/FlightRecorder: scheduled, started,
# completed)
FrState = Literal["scheduled", "started", "completed", "unknown"]


FR_STATES: Final[frozenset[str]] = frozenset(get_args(FrState))


FR_COMPLETED: Final[FrState] = "completed"


@dataclass(frozen=True)
class FrEntry:
    record_id: int
    # The process's own count of the groups it created (ProcessGroupNCCL/Gloo uid): differs across
    # ranks for one group as soon as they created different groups. `FrDump.pg_status` is keyed by it.
    pg_id: int | None
    collective_seq_id: int
    op: str  # profiling_name, e.g. "nccl:broadcast"
    state: FrState
    frames: tuple[Frame, ...]
    is_p2p: bool = False
    input_sizes: tuple[tuple[int, ...], ...] = ()
    # `process_group: (pg_name, desc)`: the group's name, the same on every rank of the group
    # (new_group's counter, or a hash of its ranks), and the user's description ("default_pg",
    # Megatron's "DATA_PARALLEL_GROUP"; "undefined" when none). None: a dump without the field.
    pg_name: str | None = None
    pg_desc: str | None = None


@dataclass(frozen=True)
class FrDump:
    rank: int
    version: str
    entries: tuple[FrEntry, ...]
    pg_status: Mapping[str, Mapping[str, int]] = field(default_factory=dict)  # by str(pg_id)
    pg_config: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # by pg_name
    pid: int | None = None


class _NoGlobalsUnpickler(pickle.Unpickler):
    """Builds plain containers and scalars only; every global (class, function) is refused."""

    def find_class(self, module: str, name: str) -> NoReturn:
        raise pickle.UnpicklingError(f"refused global {module}.{name}")


# the entry states torch records, as typed; one a newer torch adds is "unknown"
_FR_STATES: Mapping[str, FrState] = {s: s for s in get_args(FrState)}


def _unpickle(data: bytes) -> object:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ParseError(f"flight recorder: expected bytes, got {type(data).__name__}")
    if not data:
        raise ParseError("flight recorder: empty dump")
    data = bytes(data)
    check_plain_pickle(data, "flight recorder")  # before any object is built
    try:
        obj = _NoGlobalsUnpickler(io.BytesIO(data)).load()
    except pickle.UnpicklingError as exc:
        raise ParseError(f"flight recorder: unsafe or corrupt pickle ({exc})") from None
    except Exception as exc:  # corrupt pickles raise anything: EOFError, ValueError, ...
        raise ParseError(f"flight recorder: corrupt pickle ({type(exc).__name__}: {exc})") from None
    _within_budget(obj, nodes=min(MAX_NODES, NODES_PER_BYTE * len(data) + 100_000))
    return obj


MAX_NODES = 20_000_000  # containers and scalars visited, shared ones once per reference
NODES_PER_BYTE = 16  # a real dump holds about one node per 10 bytes
MAX_DEPTH = 64  # a real dump nests 5 deep


def _within_budget(obj: object, *, nodes: int) -> None:
    """ParseError when the structure, expanded as the parser will walk it (a shared object counts
    once per reference), has more than `nodes` nodes or nests deeper than MAX_DEPTH."""
    stack: list[tuple[object, int]] = [(obj, 0)]
    seen = 0
    while stack:
        item, depth = stack.pop()
        seen += 1
        if seen > nodes:
            raise ParseError(
                f"flight recorder: the pickle expands past {nodes} nodes (objects shared many "
                "times over): not read"
            )
        if depth > MAX_DEPTH:
            raise ParseError(f"flight recorder: the pickle nests deeper than {MAX_DEPTH}: not read")
        if isinstance(item, dict):
            stack.extend((k, depth + 1) for k in item)
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend((v, depth + 1) for v in item)


def _text(value: object, limit: int = 256) -> str:
    """A scalar as text (at most `limit` characters); a container is never stringified."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        try:
            return str(value)[:limit]
        except ValueError:  # an int of more than 4300 digits
            return f"<{type(value).__name__}>"
    if isinstance(value, bytes):
        return value[:limit].decode("utf-8", "replace")
    return f"<{type(value).__name__}>"


# --------------------------------------------------------------------------- field readers


def _int(value: object, what: str, *, default: int | None = None) -> int | None:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ParseError(f"flight recorder: {what} is {type(value).__name__}, not int")
    return value


def _required_int(value: object, what: str) -> int:
    number = _int(value, what)
    if number is None:
        raise ParseError(f"flight recorder: {what} is missing")
    return number


def _str(value: object, what: str) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if not isinstance(value, str):
        raise ParseError(f"flight recorder: {what} is {type(value).__name__}, not str")
    return value


def _short_filename(filename: str) -> str:
    """Like py-spy's short names: the path under site-packages, else the file's base name."""
    for marker in _PACKAGE_DIRS:
        if marker in filename:
            return filename.rsplit(marker, 1)[1]
    return filename.rsplit("/", 1)[-1]


def _frame(raw: object) -> Frame:
    if not isinstance(raw, Mapping):
        raise ParseError(f"flight recorder: a frame is {type(raw).__name__}, not a dict")
    filename = _str(raw.get("filename", ""), "frame filename")
    line = _int(raw.get("line"), "frame line")
    return Frame(
        name=_str(raw.get("name", ""), "frame name"),
        filename=filename,
        line=line if line else None,
        short_filename=_short_filename(filename),
    )


def _sizes(value: object) -> tuple[tuple[int, ...], ...]:
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)):
        raise ParseError("flight recorder: input_sizes is not a list")
    out: list[tuple[int, ...]] = []
    for shape in value:
        if not isinstance(shape, (list, tuple)):
            raise ParseError("flight recorder: an input size is not a list")
        out.append(tuple(_required_int(d, "input size dimension") for d in shape))
    return tuple(out)


def _entry(raw: object, position: int) -> FrEntry:
    if not isinstance(raw, Mapping):
        raise ParseError(f"flight recorder: entry {position} is {type(raw).__name__}, not a dict")
    frames = raw.get("frames") or []
    if not isinstance(frames, (list, tuple)):
        raise ParseError(f"flight recorder: entry {position} frames is not a list")
    is_p2p = raw.get("is_p2p", False)
    pg_name, pg_desc = _process_group(raw.get("process_group"), position)
    return FrEntry(
        record_id=_int(raw.get("record_id"), "record_id", default=position) or 0,
        pg_id=_int(raw.get("pg_id"), "pg_id"),
        collective_seq_id=_required_int(raw.get("collective_seq_id"), "collective_seq_id"),
        op=_str(raw.get("profiling_name"), "profiling_name"),
        state=_FR_STATES.get(_str(raw.get("state"), "state"), "unknown"),
        frames=tuple(_frame(f) for f in frames),
        is_p2p=is_p2p if isinstance(is_p2p, bool) else False,
        input_sizes=_sizes(raw.get("input_sizes")),
        pg_name=pg_name,
        pg_desc=pg_desc,
    )


def _process_group(value: object, position: int) -> tuple[str | None, str | None]:
    """`process_group: (pg_name, desc)`; (None, None) when the dump has no such field."""
    if value is None:
        return None, None
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise ParseError(
            f"flight recorder: entry {position} process_group is not a (name, desc) pair"
        )
    return _str(value[0], "process_group name"), _str(value[1], "process_group desc")


V = TypeVar("V")


def _per_group(
    value: object, what: str, row: Callable[[Mapping[Any, Any]], Mapping[str, V]]
) -> dict[str, Mapping[str, V]]:
    """A dump's map of process group -> map (pg_status, pg_config), each group's map read by
    `row`; absent is empty, any other shape a ParseError naming `what`."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ParseError(f"flight recorder: {what} is not a dict")
    out: dict[str, Mapping[str, V]] = {}
    for pg, inner in value.items():
        if not isinstance(inner, Mapping):
            raise ParseError(f"flight recorder: {what}[{pg!r}] is not a dict")
        out[_text(pg)] = row(inner)
    return out


def _pg_status(value: object) -> dict[str, Mapping[str, int]]:
    return _per_group(
        value,
        "pg_status",
        lambda m: {
            _text(k): v for k, v in m.items() if isinstance(v, int) and not isinstance(v, bool)
        },
    )


def _pg_config(value: object) -> dict[str, Mapping[str, str]]:
    return _per_group(value, "pg_config", lambda m: {_text(k): _text(v) for k, v in m.items()})


def _dump(data: Mapping[Any, Any], rank: int, pid: int | None) -> FrDump:
    entries = data.get("entries") or []
    if not isinstance(entries, (list, tuple)):
        raise ParseError("flight recorder: 'entries' is not a list")
    version = data.get("version")
    return FrDump(
        rank=rank,
        version=_str(version, "version") if version is not None else "",
        entries=tuple(_entry(e, pos) for pos, e in enumerate(entries)),
        pg_status=_pg_status(data.get("pg_status")),
        pg_config=_pg_config(data.get("pg_config")),
        pid=pid,
    )


def parse_flight_recorder(
    data: bytes, rank: int | None = None, *, pid: int | None = None
) -> FrDump:
    """Parse one rank's flight-recorder pickle with the restricted unpickler.

    `rank` is required in practice (the pickle does not hold it); None raises `ParseError`.
    `pid` is recorded on the fact when the caller knows it (probe meta).
    """
    if rank is None:
        raise ParseError("flight recorder: the dump does not name its rank and none was given")
    loaded = _unpickle(data)
    if not isinstance(loaded, Mapping):
        raise ParseError(f"flight recorder: top level is {type(loaded).__name__}, not a dict")
    if "entries" not in loaded and "version" not in loaded:
        raise ParseError("flight recorder: neither 'version' nor 'entries' in the dump")
    try:
        return _dump(loaded, rank, pid)
    except RecursionError:
        raise ParseError("flight recorder: nested too deeply") from None
    except TypeError as exc:  # e.g. unhashable keys built by a hostile pickle
        raise ParseError(f"flight recorder: malformed dump ({exc})") from None


def rank_from_dump_name(name: str) -> int | None:
    """The rank in a dump's file name: `fr_hang_rank_1` -> 1, `/tmp/frdump_0` -> 0, else None."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    found = _RANK_IN_NAME.findall(base)
    if found:
        return _small_int(found[-1])
    stem = base
    for suffix in _DUMP_SUFFIXES:
        if stem.lower().endswith(suffix):
            stem = stem[: -len(suffix)]
    trailing = _TRAILING_NUMBER.search(stem)
    return _small_int(trailing.group(1)) if trailing else None


def _small_int(digits: str) -> int | None:
    return int(digits) if len(digits) <= 9 else None


def _parse_record(data: bytes, rec: ProbeRecord) -> FrDump:
    rank = _meta_int(rec.meta.get("rank"))
    if rank is None:
        rank = rank_from_dump_name(str(rec.meta.get("dump") or rec.artifact or rec.target))
    return parse_flight_recorder(data, rank, pid=_meta_int(rec.meta.get("pid")))


def _meta_int(value: object) -> int | None:
    try:
        return int(value) if isinstance(value, (int, str)) else None
    except ValueError:
        return None


# The pickle one rank dumped (collect/flight_recorder.py). A 2000-entry dump is 341 KB;
# safe_pickle.MAX_OBJECTS stops one over ~40,000 entries.
SPEC = SourceSpec[FrDump](
    name=FLIGHT_RECORDER,
    parse=_parse_record,
    max_bytes=32 * 1024 * 1024,
    missing=(
        "no flight-recorder dumps (the job needs TORCH_FR_BUFFER_SIZE and "
        "TORCH_NCCL_DEBUG_INFO_PIPE_FILE, and hangdoctor --flight-recorder): per-rank "
        "collective cursors unknown"
    ),
    analysis="slime_hangdoctor.analysis.parts.flight_recorder",
)
