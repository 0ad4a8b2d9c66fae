"""Bundle -> Snapshot: run each record's parser; a record that fails to parse becomes a blind spot."""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from slime_hangdoctor.bundle import Bundle, ProbeRecord
from slime_hangdoctor.errors import ParseError
from slime_hangdoctor.outcome import Outcome
from slime_hangdoctor.snapshot import Snapshot
from slime_hangdoctor.source_spec import Observed, SourceSpec
from slime_hangdoctor.sources import BY_NAME

_T = TypeVar("_T")


class _Loading:
    """What the loader has filed so far (mutable, used only while loading one bundle)."""

    def __init__(self, cache: ParseCache | None = None) -> None:
        self.cache = cache
        self.observed: list[Observed[Any]] = []
        self.blind: list[str] = []
        self.failed: list[ProbeRecord] = []  # probes that did not end ok (their lines in `blind`)

    def parse(self, rec: ProbeRecord, parser: str, parse: Callable[[], _T]) -> _T:
        """`parse()`, through the cache where there is one."""
        if self.cache is None:
            return parse()
        return self.cache.parsed(rec.artifact, parser, parse)


class ParseCache:
    """The artefacts of a bundle that is still being written, each read and parsed once.

    While collecting, discovery re-reads what the writer holds after each step (Ray state, the
    process tables, the routers' answers), and the analysis then reads it all again; an artefact
    never changes once written, so its bytes and each parser's result (or error) are kept by
    artefact name. Only for the writer's own bundle (collect/node.py `parse_cache`): an untrusted
    bundle is read through the parse budget, with no cache. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._data: dict[str, bytes] = {}
        self._parsed: dict[tuple[str, str], _Parsed] = {}

    def data(self, artifact: str) -> bytes | None:
        with self._lock:
            return self._data.get(artifact)

    def keep(self, artifact: str, data: bytes) -> None:
        with self._lock:
            self._data[artifact] = data

    def parsed(self, artifact: str | None, parser: str, parse: Callable[[], _T]) -> _T:
        """`parse()`'s result for this artefact and parser, from the cache after the first call
        (an exception it raised is raised again)."""
        if artifact is None:
            return parse()
        key = (artifact, parser)
        with self._lock:
            hit = self._parsed.get(key)
        if hit is None:
            try:
                hit = _Parsed(parse(), None)
            except Exception as exc:  # noqa: BLE001 - kept, and raised again below
                hit = _Parsed(None, exc)
            with self._lock:
                self._parsed[key] = hit
        if hit.error is not None:
            raise hit.error
        value: _T = hit.value
        return value


@dataclass(frozen=True)
class _Parsed:
    value: Any
    error: Exception | None


def load_snapshot(bundle: Bundle, cache: ParseCache | None = None) -> Snapshot:
    """Parse every artefact of `bundle`; never raises for a bad artefact (it becomes a blind spot).

    Every record is filed by its source's spec (`spec.parse`, or `spec.parse_any` for a source
    whose failed answers are evidence too). A bundle given to `analyse` is untrusted: what is
    parsed is capped before it is read (an artefact over its source's cap, one that an earlier
    record already named, and everything past MAX_PARSE_COST are blind spots, not parsed).
    `cache`: the collector's own bundle only."""
    acc = _Loading(cache)
    budget = _Budget()
    for rec in bundle.manifest.probes:
        spec = BY_NAME.get(rec.source)
        every = spec is not None and spec.parse_any is not None
        if rec.outcome is not Outcome.OK and not every:
            acc.blind.append(describe_failure(rec))
            acc.failed.append(rec)
            continue
        data, refused = _read(bundle, rec, budget, cache)
        if refused is not None:
            acc.blind.append(f"{rec.source} {rec.target}: not parsed: {refused}")
        if rec.reason and spec is not None and spec.partial and rec.outcome is Outcome.OK:
            acc.blind.append(f"{rec.source} {rec.target}: partly seen: {rec.reason}")
        missing = data is None and refused is None and (rec.artifact or not every)
        if missing and rec.outcome is Outcome.OK:
            acc.blind.append(f"{rec.source} {rec.target}: artefact missing from the bundle")
        if spec is not None and (data is not None or every):
            _file(acc, spec, rec, data)
    return Snapshot(
        manifest=bundle.manifest,
        observed=tuple(acc.observed),
        blind_spots=tuple(dict.fromkeys(_one_per_cause(acc.blind, acc.failed))),
    )


def _one_per_cause(lines: list[str], failed: list[ProbeRecord]) -> list[str]:
    """One blind spot per cause: probes of several sources at one target that failed alike (the
    same outcome and reason: NVML's and GPM's readings of a node without a driver) are one line,
    `nvml, gpm gpus: unavailable: ...`, at the place of the first."""
    groups: dict[tuple[str, str, str], list[ProbeRecord]] = {}
    for rec in failed:
        if rec.reason:
            groups.setdefault((rec.target, rec.outcome.value, rec.reason), []).append(rec)
    replace: dict[str, str | None] = {}
    for (target, outcome, reason), recs in groups.items():
        sources = list(dict.fromkeys(r.source for r in recs))
        if len(sources) < 2:
            continue
        for i, rec in enumerate(recs):
            line = f"{', '.join(sources)} {target}: {outcome}: {reason}" if i == 0 else None
            replace.setdefault(describe_failure(rec), line)
    out = [replace.get(line, line) for line in lines]
    return [line for line in out if line is not None]


def _read(
    bundle: Bundle, rec: ProbeRecord, budget: _Budget, cache: ParseCache | None
) -> tuple[bytes | None, str | None]:
    """A record's artefact (from the cache where the writer's own bundle kept it), or why it was
    not read (the parse budget)."""
    if not rec.artifact:
        return None, None
    kept = cache.data(rec.artifact) if cache is not None else None
    if kept is not None:
        return kept, None
    refused = budget.admit(bundle, rec)
    if refused is not None:
        return None, refused
    data = bundle.read(rec)
    if data is None:
        return None, None
    refused = budget.charge(data)
    if refused is not None:
        return None, refused
    if cache is not None:
        cache.keep(rec.artifact, data)
    return data, None


# What one bundle may make the loader parse. Parsing costs more than the bytes: each JSON object
# becomes a dict, and most become a fact that the analysis keeps (16 MiB of `{"pid": N}` rows took
# 809 MiB and 22 s). An artefact costs its length plus OBJECT_COST per `{` in it. The budget holds
# a big cluster's bundle (a recorded demo bundle costs at most 2.1 MiB) and bounds a crafted one.
_MiB = 1024 * 1024
MAX_PARSE_COST = 128 * _MiB
OBJECT_COST = 256


class _Budget:
    """The parse budget of one bundle, and the artefacts that records have already named."""

    def __init__(self) -> None:
        self.spent = 0
        self.seen: set[tuple[int, int]] = set()

    def admit(self, bundle: Bundle, rec: ProbeRecord) -> str | None:
        """Why `rec`'s artefact is not to be read, or None. A record that names a file an earlier
        record named is refused (eight records on one 4 MiB artefact took 959 MiB and 61 s)."""
        try:
            path = (bundle.root / str(rec.artifact)).resolve()
            if bundle.real_root not in path.parents:
                return None  # outside the bundle: Bundle.read never reads it
            st = os.stat(path)
        except (OSError, ValueError, RuntimeError):
            return None  # missing: Bundle.read says so
        if not stat.S_ISREG(st.st_mode):
            return None  # Bundle.read refuses it
        key = (st.st_dev, st.st_ino)
        if key in self.seen:
            return "its artefact is another record's (a manifest of ours never shares one)"
        self.seen.add(key)
        spec = BY_NAME.get(rec.source)
        cap = spec.max_bytes if spec is not None else 64 * _MiB
        if st.st_size > cap:
            return f"its artefact is {st.st_size} bytes, over the {cap} bytes kept for {rec.source}"
        if self.spent + st.st_size > MAX_PARSE_COST:
            return self.exhausted()
        return None

    def charge(self, data: bytes) -> str | None:
        """Spend what parsing `data` costs; why not, when it would go over the budget."""
        cost = len(data) + OBJECT_COST * data.count(b"{")
        if self.spent + cost > MAX_PARSE_COST:
            return self.exhausted()
        self.spent += cost
        return None

    @staticmethod
    def exhausted() -> str:
        return (
            f"parse budget exhausted ({MAX_PARSE_COST // _MiB} MiB a bundle, each JSON object "
            f"counted as {OBJECT_COST} bytes)"
        )


def describe_failure(rec: ProbeRecord) -> str:
    """One line for a probe that did not end ok."""
    reason = f": {rec.reason}" if rec.reason else ""
    return f"{rec.source} {rec.target}: {rec.outcome.value}{reason}"


def _file(acc: _Loading, spec: SourceSpec[Any], rec: ProbeRecord, data: bytes | None) -> None:
    """Parse one record of `spec`'s source into its fact, and the blind spots the fact shows."""
    try:
        if spec.parse_any is not None:
            parse_any = spec.parse_any
            fact = acc.parse(rec, spec.name, lambda: parse_any(data, rec))
        else:
            assert spec.parse is not None and data is not None
            parse = spec.parse
            body = data
            fact = acc.parse(rec, spec.name, lambda: parse(body, rec))
    except ParseError as exc:
        acc.blind.append(f"{rec.source} {rec.target}: could not parse: {exc}")
        return
    except Exception as exc:  # noqa: BLE001 - a bundle is untrusted input: never crash on it
        acc.blind.append(
            f"{rec.source} {rec.target}: could not parse: {type(exc).__name__}: {exc}"[:400]
        )
        return
    acc.observed.append(Observed(spec.name, rec.node_ip, rec.sample or 0, fact, rec.started_at))
    if spec.notes is not None:
        acc.blind.extend(spec.notes(fact, rec))
