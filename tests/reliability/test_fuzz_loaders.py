"""Fuzzing (hypothesis) from the real fixtures: the Ray state and processes parsers, the bundle
loader `load_snapshot` on mutated real bundles, and `analyse` end to end (open, load, build the
topology, diagnose, render text / JSON / markdown) on mutated real bundles.

A parser returns its facts or raises ParseError; nothing else. A bundle either opens or is
refused with BundleInvalid (a message, exit 3); an opened bundle always loads (a bad artefact is a
blind spot naming its record) and always renders. Mutations are the named transformations of
tests/fixtures/transforms/ (truncation, byte flips, invalid UTF-8, long digit runs, a JSON
value replaced, a key dropped, a file deleted). The GPU/NCCL/stack parsers and the SGLang parsers
are fuzzed in tests/unit/test_parsers_fuzz_gpu.py and test_parsers_sglang.py.

Cases FZ1-FZ5 of docs/reliability.md. HANGDOCTOR_FUZZ_EXAMPLES raises the example counts."""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console

from slime_hangdoctor.bundle import open_bundle
from slime_hangdoctor.errors import BundleInvalid, ParseError
from slime_hangdoctor.facts import GpuSeries
from slime_hangdoctor.load import load_snapshot
from slime_hangdoctor.outcome import Outcome
from slime_hangdoctor.parsers.processes import ProcessInfo, parse_processes
from slime_hangdoctor.parsers.ray_state import (
    STATE_ENDPOINTS,
    TASK_HISTORY,
    ClusterResources,
    ObjectStoreUsage,
    RayActor,
    RayJob,
    RayNode,
    RayPlacementGroup,
    RayTask,
    TaskPage,
)
from slime_hangdoctor.pipeline import analyse_bundle
from slime_hangdoctor.render import render
from tests.fixtures import transforms as tf

pytestmark = pytest.mark.timeout(240)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
RAY_H200 = FIXTURES / "real" / "gpu-2xh200-ray-nccl-hang"
RAY_LOCAL = FIXTURES / "real" / "local-cpu-ray-2.60-two-actors"
RAY_QUEUES = FIXTURES / "real" / "local-cpu-ray-2.60-actor-queues"
# answers the two-actor capture lacks: the actor-queues capture's file for them
_QUEUES_FILES = {
    "tasks_unfinished": "tasks.json",
    TASK_HISTORY.target: "tasks.json",
    "placement_groups": "placement_groups.json",
    "cluster_status": "cluster_status.json",
}
BUNDLES = FIXTURES / "bundles"
DEMO_BUNDLES = FIXTURES / "analysis" / "demo"

EXAMPLES = int(os.environ.get("HANGDOCTOR_FUZZ_EXAMPLES", "0")) or None
FAST = settings(
    max_examples=EXAMPLES or 100,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
SLOW = settings(FAST, max_examples=EXAMPLES or 30)

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.just(10**400)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
    | st.just("../../../etc/passwd"),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)


# --------------------------------------------------------------------------- sources


def _dashboard_bodies(endpoint: str, target: str) -> tuple[str, ...]:
    """Real bodies of one endpoint: both 2x H200 captures and the local Ray 2.60 capture (whose
    files are named by the endpoint's artefact name)."""
    out = []
    for capture in ("hang", "busy"):
        answers = json.loads((RAY_H200 / capture / "dashboard.json").read_text(encoding="utf-8"))
        out += [v["body"] for k, v in answers.items() if k.startswith(endpoint)]
    local = RAY_LOCAL / "dashboard" / f"{target}.json"
    if target in _QUEUES_FILES:
        local = RAY_QUEUES / _QUEUES_FILES[target]
    out.append(local.read_text(encoding="utf-8"))
    assert all(isinstance(b, str) and b for b in out)
    return tuple(out)


@cache
def _processes_sources() -> tuple[str, ...]:
    procs = [(RAY_LOCAL / "processes.json").read_text(encoding="utf-8")]
    for bundle in sorted(BUNDLES.iterdir()):
        procs += [p.read_text(encoding="utf-8") for p in (bundle / "raw").rglob("processes*.json")]
    return tuple(procs)


@cache
def _paths(text: str) -> tuple[tf.JsonPath, ...]:
    return tuple(tf.json_paths(text))


@st.composite
def _mutated(draw: st.DrawFn, sources: tuple[str, ...]) -> bytes:
    """Bytes of a real body after 1-3 byte-level transformations, or one JSON value replaced."""
    text = draw(st.sampled_from(sources))
    if draw(st.booleans()):
        paths = _paths(text)
        if paths:
            path = draw(st.sampled_from(paths))
            return tf.set_json_path(text, path, draw(JSON_VALUES)).encode()
    return draw(_byte_ops(text.encode()))


@st.composite
def _byte_ops(draw: st.DrawFn, data: bytes) -> bytes:
    for op in draw(
        st.lists(st.sampled_from(["truncate", "flip", "utf8", "digits"]), min_size=1, max_size=3)
    ):
        if op == "truncate":
            data = tf.truncate_bytes_at(data, draw(st.integers(0, len(data))))
        elif op == "flip":
            data = tf.flip_byte(
                data, draw(st.integers(0, max(len(data) - 1, 0))), draw(st.integers(1, 255))
            )
        elif op == "utf8":
            data = tf.insert_invalid_utf8(data, draw(st.integers(0, len(data))))
        else:
            # at most 3 x 1000 digits: below CPython's 4300-digit int limit, whose crash is
            # test_huge_integer_* below
            data = tf.insert_digits(
                data, draw(st.integers(0, len(data))), draw(st.sampled_from([400, 1000]))
            )
    return data


def _parses_or_refuses(
    parse: Callable[[Any], tuple[Any, ...]], body: bytes, fact: type | tuple[type, ...]
) -> None:
    """The parser's whole contract: facts of the right type, or ParseError with a reason."""
    for arg in (body, body.decode("utf-8", "replace")):
        try:
            result = parse(arg)
        except ParseError as exc:
            assert str(exc).strip(), "a ParseError without a reason"
            continue
        assert isinstance(result, tuple) and all(isinstance(x, fact) for x in result), result


# --------------------------------------------------------------------------- FZ1, FZ2 parsers


# Every dashboard answer the loader parses (the source's own table), with the fact it yields.
_FACTS: dict[str, type | tuple[type, ...]] = {
    "actors": RayActor,
    "tasks_running": RayTask,
    "nodes": RayNode,
    "jobs": RayJob,
    "node_summary": (GpuSeries, ObjectStoreUsage),  # GPUs and each raylet's object store
    "tasks_unfinished": TaskPage,
    TASK_HISTORY.target: TaskPage,
    "placement_groups": RayPlacementGroup,
    "cluster_status": ClusterResources,
}
RAY_PARSERS: tuple[
    tuple[str, str, Callable[[Any], tuple[Any, ...]], type | tuple[type, ...]], ...
] = tuple(
    (e.path, e.target, e.parse, _FACTS[e.target])
    for e in (*STATE_ENDPOINTS, TASK_HISTORY)
    if e.parse is not None
)


@pytest.mark.parametrize(
    ("endpoint", "target", "parse", "fact"), RAY_PARSERS, ids=[e for e, *_ in RAY_PARSERS]
)
def test_fuzz_ray_state(
    endpoint: str,
    target: str,
    parse: Callable[[Any], tuple[Any, ...]],
    fact: type | tuple[type, ...],
) -> None:
    """FZ1: every Ray state / Job API / node summary parser on mutated real answers."""
    sources = _dashboard_bodies(endpoint, target)
    for body in sources:  # the real answers themselves parse
        assert all(isinstance(x, fact) for x in parse(body.encode()))

    @FAST
    @given(_mutated(sources))
    def check(body: bytes) -> None:
        _parses_or_refuses(parse, body, fact)

    check()


@FAST
@given(_mutated(_processes_sources()))
def test_fuzz_processes(body: bytes) -> None:
    """FZ2: the processes artefact parser on mutated real artefacts."""
    _parses_or_refuses(parse_processes, body, ProcessInfo)


# --------------------------------------------------------------------------- FZ3-FZ5 bundles


@pytest.fixture(scope="module")
def bundle_sources() -> Iterator[tuple[Path, ...]]:
    """The real fixture bundles, plus two real demo bundles unpacked (Ray, py-spy, SGLang)."""
    tmp = Path(tempfile.mkdtemp(prefix="hd-fuzz-"))
    try:
        roots = [p for p in sorted(BUNDLES.iterdir()) if (p / "manifest.json").is_file()]
        for name in ("rollout_engine_stuck", "weight_sync_engine_missing"):
            with tarfile.open(DEMO_BUNDLES / f"{name}.tar.gz") as tar:
                tar.extractall(tmp / name, filter="data")
            roots += [m.parent for m in (tmp / name).rglob("manifest.json")]
        yield tuple(roots)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# Manifest fields the hypothesis search may rewrite with any JSON value. The typed fields of the
# records and of the manifest (artifact, node_ip, sample, started_at, elapsed_s, created_at,
# window_s, sample_times, target) are not searched: each of them still crashes the loader when
# given a wrong type; test_manifest_field_of_the_wrong_type below holds those cases.
_SEARCHED_FIELDS = ("meta", "reason", "options", "command", "hosts", "tool_version", "finished_at")


def _searched(path: tf.JsonPath) -> bool:
    if path[0] == "probes":
        return len(path) > 2 and path[2] in _SEARCHED_FIELDS
    return path[0] in _SEARCHED_FIELDS


@st.composite
def _damage(draw: st.DrawFn, roots: tuple[Path, ...]) -> tuple[Path, str, Any]:
    """(source bundle, kind of damage, its parameters)."""
    root = draw(st.sampled_from(roots))
    manifest = json.loads((root / "manifest.json").read_text(encoding="utf-8"))
    artefacts = [p["artifact"] for p in manifest["probes"] if p.get("artifact")]
    kinds = ["artefact-bytes", "artefact-json", "delete", "manifest-bytes", "manifest-json"]
    kind = draw(st.sampled_from([*kinds, "manifest-key"]))
    if kind in ("artefact-bytes", "artefact-json", "delete"):
        artefact = draw(st.sampled_from(artefacts))
        data = (root / artefact).read_bytes()
        if kind == "artefact-bytes":
            return root, kind, (artefact, draw(_byte_ops(data)))
        if kind == "artefact-json":
            try:
                paths = _paths(data.decode("utf-8"))
            except (UnicodeDecodeError, ValueError):
                paths = ()
            if not paths:
                return root, "artefact-bytes", (artefact, draw(_byte_ops(data)))
            text = tf.set_json_path(data.decode(), draw(st.sampled_from(paths)), draw(JSON_VALUES))
            return root, kind, (artefact, text.encode())
        return root, kind, artefact
    text = (root / "manifest.json").read_text(encoding="utf-8")
    if kind == "manifest-bytes":
        return root, kind, draw(_byte_ops(text.encode()))
    if kind == "manifest-key":
        keys = sorted({k for p in manifest["probes"] for k in p} | set(manifest))
        return root, kind, tf.drop_json_key(text, draw(st.sampled_from(keys))).encode()
    path = draw(st.sampled_from([p for p in _paths(text) if _searched(p)]))
    return root, kind, tf.set_json_path(text, path, draw(JSON_VALUES)).encode()


def _apply(damage: tuple[Path, str, Any], dst: Path) -> Path:
    root, kind, arg = damage
    shutil.copytree(root, dst)
    if kind in ("artefact-bytes", "artefact-json"):
        artefact, data = arg
        (dst / artefact).write_bytes(data)
    elif kind == "delete":
        (dst / arg).unlink()
    else:
        (dst / "manifest.json").write_bytes(arg)
    return dst


def test_fuzz_load_snapshot(bundle_sources: tuple[Path, ...]) -> None:
    """FZ3: `load_snapshot` on mutated real bundles never raises; every blind spot is text."""

    @FAST
    @given(_damage(bundle_sources))
    def check(damage: tuple[Path, str, Any]) -> None:
        with tempfile.TemporaryDirectory(prefix="hd-fuzz-b-") as tmp:
            path = _apply(damage, Path(tmp) / "b")
            try:
                bundle = open_bundle(path)
            except BundleInvalid as exc:
                assert damage[1].startswith("manifest") and str(exc).strip()
                return
            with bundle:
                snapshot = load_snapshot(bundle)
                gone = [r for r in bundle.manifest.probes if r.artifact == damage[2]]
            spots = snapshot.blind_spots
            assert all(isinstance(s, str) and s for s in spots)
            if damage[1] == "delete":
                # an ok record whose artefact is gone says so; a failed one (its artefact is the
                # tool's error output) is a blind spot for its failure, artefact or not
                for rec in gone:
                    if rec.outcome is Outcome.OK:
                        want = f"{rec.source} {rec.target}: artefact missing from the bundle"
                        assert want in spots, (want, spots)
                    else:
                        assert any(
                            s.startswith(rec.source) and rec.outcome.value in s for s in spots
                        ), (rec, spots)

    check()


def _render_all(diagnosis: Any) -> dict[str, str]:
    out = {}
    for fmt in ("text", "json", "markdown"):
        buf = io.StringIO()
        render(diagnosis, fmt, Console(file=buf, width=100, soft_wrap=False))
        out[fmt] = buf.getvalue()
    return out


def test_fuzz_analyse_end_to_end(bundle_sources: tuple[Path, ...]) -> None:
    """FZ4: `analyse` (open, load, topology, diagnosis, the three renderers) on mutated real
    bundles, as a directory and as a .tar.gz: a message (BundleInvalid) or a rendered verdict."""

    @SLOW
    @given(_damage(bundle_sources), st.booleans())
    def check(damage: tuple[Path, str, Any], as_tar: bool) -> None:
        with tempfile.TemporaryDirectory(prefix="hd-fuzz-a-") as tmp:
            path = _apply(damage, Path(tmp) / "b")
            if as_tar:
                with tarfile.open(Path(tmp) / "b.tar.gz", "w:gz") as tar:
                    tar.add(path, arcname="b")
                path = Path(tmp) / "b.tar.gz"
            try:
                analysed = analyse_bundle(path)
            except BundleInvalid as exc:
                assert damage[1].startswith("manifest") and str(exc).strip()
                return
            reports = _render_all(analysed.diagnosis)
            doc = json.loads(reports["json"])
            assert doc["schema"] == "slime-hangdoctor.verdict/1" and doc["exit_code"] in (
                0,
                1,
                2,
                3,
            )
            assert reports["text"].strip() and reports["markdown"].strip()

    check()


# The dashboard answers the loader reads (the others, /api/version and the like, are kept for
# people, not parsed); SGLang/router answers are checked by their own loader path (below).
_PARSED_DASHBOARD = ("/api/v0/actors", "/api/v0/tasks", "/api/v0/nodes", "/api/jobs", "/nodes")


def _parsed(rec: dict[str, Any]) -> bool:
    if rec["source"] in ("sglang", "router"):
        return False
    if rec["source"] == "ray_dashboard":
        endpoint = str(rec["meta"].get("endpoint") or rec["target"])
        return endpoint.startswith(_PARSED_DASHBOARD)
    return True


def test_fuzz_damaged_artefact_is_a_named_blind_spot(
    bundle_sources: tuple[Path, ...], tmp_path: Path
) -> None:
    """FZ5: artefacts replaced by bytes no parser accepts each become a blind spot naming their
    record (`<source> <target>: could not parse: <why>`), for every kind of artefact."""
    for i, root in enumerate(bundle_sources):
        dst = tmp_path / f"b{i}"
        shutil.copytree(root, dst)
        manifest = json.loads((root / "manifest.json").read_text(encoding="utf-8"))
        damaged = [r for r in manifest["probes"] if r.get("artifact") and r["outcome"] == "ok"]
        damaged = [r for r in damaged if _parsed(r)]
        for rec in damaged:
            (dst / rec["artifact"]).write_bytes(b"\x00\xff{{ not it")
        with open_bundle(dst) as bundle:
            spots = load_snapshot(bundle).blind_spots
        assert damaged
        for rec in damaged:
            want = f"{rec['source']} {rec['target']}: could not parse:"
            assert any(s.startswith(want) for s in spots), (root.name, want, spots)


# --------------------------------------------------------------------------- known crashers

RECORD_FIELDS = [
    ("artifact", [1]),
    ("artifact", 1),
    ("started_at", 10**400),
    ("elapsed_s", 10**400),
    ("sample", "x"),
    ("sample", {"a": 1}),
    ("node_ip", 1.5),
    ("node_ip", {}),
]
MANIFEST_FIELDS = [
    ("created_at", 10**400),
    ("window_s", 10**400),
    ("sample_times", [10**400]),
    ("target", {"sglang_urls": 5}),
]


def _analyse_or_refuse(root: Path, change: Callable[[dict[str, Any]], None], tmp: Path) -> None:
    dst = tmp / "b"
    shutil.copytree(root, dst)
    doc = json.loads((dst / "manifest.json").read_text(encoding="utf-8"))
    change(doc)
    (dst / "manifest.json").write_text(json.dumps(doc), encoding="utf-8")
    try:
        analysed = analyse_bundle(dst)
    except BundleInvalid:
        return
    _render_all(analysed.diagnosis)


@pytest.mark.parametrize(
    ("field", "value"),
    RECORD_FIELDS + MANIFEST_FIELDS,
    ids=[f"{f}={str(v)[:8]}" for f, v in RECORD_FIELDS + MANIFEST_FIELDS],
)
def test_manifest_field_of_the_wrong_type(tmp_path: Path, field: str, value: Any) -> None:
    """FZ6: a manifest whose typed fields hold another type (or a float out of range): refused
    with BundleInvalid, or analysed; never an exception (the CLI shows an internal error)."""
    root = BUNDLES / "gpu-2xh200-ray-nccl-hang"

    def change(doc: dict[str, Any]) -> None:
        if field in dict(RECORD_FIELDS):
            for rec in doc["probes"]:
                rec[field] = value
        else:
            doc[field] = value

    _analyse_or_refuse(root, change, tmp_path)


# a record's meta (each source's own fields); the first is the fuzzer's find on a demo bundle: an
# SGLang answer whose meta.elapsed_s is a list (the loader called float() on it)
META_FIELDS = [
    ("elapsed_s", [None]),
    ("elapsed_s", "fast"),
    ("elapsed_s", 10**400),
    ("status", [200]),
    ("pid", {"a": 1}),
]


@pytest.mark.parametrize(
    ("field", "value"), META_FIELDS, ids=[f"meta.{f}={str(v)[:8]}" for f, v in META_FIELDS]
)
def test_meta_field_of_the_wrong_type(tmp_path: Path, field: str, value: Any) -> None:
    """FZ6 for the records' meta: a field of another type is analysed (or the bundle refused),
    never an exception. On a recorded demo bundle, whose records carry every source's meta."""
    from tests.unit.demo_bundles import unpacked

    root = unpacked("rollout_engine_stuck", tmp_path / "src")
    changed = []

    def change(doc: dict[str, Any]) -> None:
        for rec in doc["probes"]:
            if field in (rec.get("meta") or {}):
                rec["meta"][field] = value
                changed.append(rec["source"])

    _analyse_or_refuse(root, change, tmp_path)
    assert changed  # the bundle has such records: the case is exercised


HUGE = b"9" * 5000  # CPython refuses int() of more than 4300 digits (ValueError)


@pytest.mark.parametrize(
    "parse",
    [*(parse for _, _, parse, _ in RAY_PARSERS), parse_processes],
)
def test_huge_integer_is_a_parse_error(parse: Callable[[Any], tuple[Any, ...]]) -> None:
    """FZ7: a body that is one integer of 5000 digits: ParseError, like any other bad body."""
    _parses_or_refuses(parse, HUGE, object)


def test_huge_integer_manifest_is_refused(tmp_path: Path) -> None:
    """FZ7 (manifest): a manifest.json that is one 5000-digit integer: BundleInvalid."""
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "manifest.json").write_bytes(HUGE)
    with pytest.raises(BundleInvalid):
        open_bundle(tmp_path / "b")


def test_huge_integer_artefact_is_a_blind_spot(tmp_path: Path) -> None:
    """FZ7 (bundle): the same body as an artefact: a blind spot, not a crash of `analyse`."""
    root = BUNDLES / "gpu-2xh200-ray-nccl-hang"
    dst = tmp_path / "b"
    shutil.copytree(root, dst)
    doc = json.loads((dst / "manifest.json").read_text(encoding="utf-8"))
    actors = next(p for p in doc["probes"] if "/api/v0/actors" in str(p["meta"].get("endpoint")))
    (dst / actors["artifact"]).write_bytes(HUGE)
    spots = analyse_bundle(dst).diagnosis.verdict.blind_spots
    assert any("could not parse" in s for s in spots)
