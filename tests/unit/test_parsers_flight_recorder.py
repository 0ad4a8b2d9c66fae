"""Flight-recorder parser on real PyTorch 2.11 dumps (version 2.10), and its pickle safety."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest

from slime_hangdoctor.errors import ParseError
from slime_hangdoctor.parsers.flight_recorder import (
    FrDump,
    parse_flight_recorder,
    rank_from_dump_name,
)
from tests.fixtures import transforms as tf

NCCL = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "gpu-2xh200-nccl-broadcast-hang"
HANG0 = NCCL / "run3_hang.fr.fr_hang_rank_0.pkl"
HANG1 = NCCL / "run3_hang.fr.fr_hang_rank_1.pkl"
STUCK0 = NCCL / "run3_train_stuck.fr.fr_train_stuck_rank_0.pkl"


def _dump(path: Path) -> FrDump:
    return parse_flight_recorder(path.read_bytes(), rank_from_dump_name(path.name))


def test_hang_rank0_last_entry_is_the_started_broadcast() -> None:
    dump = _dump(HANG0)
    assert (dump.rank, dump.version, dump.pid) == (0, "2.10", None)
    assert [e.collective_seq_id for e in dump.entries] == [1, 2]
    last = dump.entries[-1]
    assert (last.record_id, last.pg_id, last.op, last.state) == (1, 0, "nccl:broadcast", "started")
    assert last.is_p2p is False and last.input_sizes == ((268435456,),)
    assert last.frames[0].where == "broadcast (torch/distributed/distributed_c10d.py:2968)"
    assert last.frames[0].filename.endswith("site-packages/torch/distributed/distributed_c10d.py")
    caller = last.frames[2]
    assert (caller.name, caller.filename, caller.short_filename, caller.line) == (
        "update_weights_from_distributed",
        "/job/nccl_hang.py",
        "nccl_hang.py",
        16,
    )
    assert not any(f.native for f in last.frames)
    assert dump.pg_status == {
        "0": {
            "last_enqueued_collective": 2,
            "last_started_collective": 2,
            "last_completed_collective": 1,
        }
    }
    assert dump.pg_config["0"] == {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}
    assert (last.pg_name, last.pg_desc) == ("0", "default_pg")  # process_group: (name, desc)


def test_hang_rank1_last_completed_is_seq_1() -> None:
    dump = _dump(HANG1)
    assert dump.rank == 1
    (only,) = dump.entries
    assert (only.collective_seq_id, only.op, only.state) == (1, "nccl:all_reduce", "completed")
    assert dump.pg_status["0"]["last_enqueued_collective"] == 1


def test_train_stuck_rank0_is_in_all_reduce_of_train_one_step() -> None:
    last = _dump(STUCK0).entries[-1]
    assert (last.collective_seq_id, last.op, last.state) == (2, "nccl:all_reduce", "started")
    assert "train_one_step" in [f.name for f in last.frames]


def test_pid_is_recorded_when_known() -> None:
    assert parse_flight_recorder(HANG0.read_bytes(), 0, pid=571).pid == 571


@pytest.mark.parametrize(
    ("name", "rank"),
    [
        ("fr_hang_rank_1", 1),
        ("run3_hang.fr.fr_hang_rank_0.pkl", 0),
        ("/tmp/frdump_3", 3),
        ("nccl_trace_rank-12.pkl", 12),
        ("raw/flight_recorder/10.0.0.1/rank7.s1.pkl", 7),
        ("dump", None),
        ("", None),
    ],
)
def test_rank_from_dump_name(name: str, rank: int | None) -> None:
    assert rank_from_dump_name(name) == rank


def test_rank_is_required() -> None:
    with pytest.raises(ParseError, match="rank"):
        parse_flight_recorder(HANG0.read_bytes(), None)


def test_dropped_and_defaulted_fields() -> None:
    data = HANG0.read_bytes()
    no_sizes = parse_flight_recorder(tf.fr_drop_entry_field(data, "input_sizes"), 0)
    assert no_sizes.entries[-1].input_sizes == ()
    no_ids = parse_flight_recorder(tf.fr_drop_entry_field(data, "record_id"), 0)
    assert [e.record_id for e in no_ids.entries] == [0, 1]  # position in the ring
    no_frames = parse_flight_recorder(tf.fr_drop_entry_field(data, "frames"), 0)
    assert no_frames.entries[-1].frames == ()
    no_pg = parse_flight_recorder(tf.fr_drop_entry_field(data, "pg_id"), 0)
    assert no_pg.entries[-1].pg_id is None
    no_group = parse_flight_recorder(tf.fr_drop_entry_field(data, "process_group"), 0)
    assert (no_group.entries[-1].pg_name, no_group.entries[-1].pg_desc) == (None, None)
    assert no_group.entries[-1].pg_id == 0  # older torch: the pg_id is all there is


def test_round_trip_of_the_fixture_is_identical() -> None:
    data = HANG0.read_bytes()
    assert parse_flight_recorder(tf.fr_redump(data, lambda d: None), 0) == _dump(HANG0)


# --------------------------------------------------------------------------- safety


class _MakeDir:
    """An object whose unpickling calls os.mkdir: the shape of a malicious bundle."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.mkdir, (str(self.path),))


def test_a_pickle_that_would_run_code_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "pwned"
    evil = tf.fr_with_payload(HANG0.read_bytes(), _MakeDir(target))
    with pytest.raises(ParseError, match=r"refused global (posix|os)\.mkdir"):
        parse_flight_recorder(evil, 0)
    assert not target.exists()
    pickle.loads(evil)  # the payload is live: an ordinary unpickler runs it
    assert target.is_dir()


@pytest.mark.parametrize(
    "payload",
    [
        pickle.dumps(Path("/etc/passwd")),
        pickle.dumps({"entries": [], "version": "2.10", "x": Path("/")}),
        pickle.dumps({"entries": [], "version": "2.10", "x": range(3)}),
        pickle.dumps({"entries": [], "version": "2.10", "x": frozenset({1})}, protocol=2),
    ],
)
def test_any_global_is_refused(payload: bytes) -> None:
    with pytest.raises(ParseError, match="refused global"):
        parse_flight_recorder(payload, 0)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda d: b"", "empty"),
        (lambda d: tf.truncate_bytes_at(d, len(d) // 2), "corrupt"),
        (lambda d: b"not a pickle at all", "corrupt"),
        (lambda d: pickle.dumps([1, 2, 3]), "not a dict"),
        (lambda d: pickle.dumps({"foo": 1}), "neither 'version' nor 'entries'"),
        (lambda d: tf.fr_set_entry_field(d, "collective_seq_id", "2"), "collective_seq_id"),
        (lambda d: tf.fr_set_entry_field(d, "collective_seq_id", None), "collective_seq_id"),
        (lambda d: tf.fr_set_entry_field(d, "profiling_name", 5), "profiling_name"),
        (lambda d: tf.fr_set_entry_field(d, "frames", "x"), "frames is not a list"),
        (lambda d: tf.fr_set_entry_field(d, "frames", [1]), "a frame is int"),
        (lambda d: tf.fr_set_entry_field(d, "input_sizes", [["a"]]), "input size"),
        (lambda d: tf.fr_set_entry_field(d, "process_group", "0"), "process_group is not"),
        (lambda d: tf.fr_set_entry_field(d, "process_group", ("0", 5)), "process_group desc"),
        (lambda d: tf.fr_redump(d, lambda doc: doc.update(entries=5)), "'entries' is not a list"),
        (lambda d: tf.fr_redump(d, lambda doc: doc.update(pg_status=[1])), "pg_status"),
        (lambda d: tf.fr_redump(d, lambda doc: doc.update(version=2.1)), "version"),
    ],
)
def test_bad_dumps_raise_parse_error(change: object, match: str) -> None:
    with pytest.raises(ParseError, match=match):
        parse_flight_recorder(change(HANG0.read_bytes()), 0)  # type: ignore[operator]


def test_wrong_input_type() -> None:
    with pytest.raises(ParseError, match="expected bytes"):
        parse_flight_recorder("text", 0)  # type: ignore[arg-type]


def _memo_bomb(levels: int) -> bytes:
    """A pickle that shares one list `levels` times over: each level doubles what `str()` of it
    (or any walk that does not stop) expands to, while the pickle stays a few hundred bytes."""
    import pickle

    node: object = "x" * 8
    for _ in range(levels):
        node = [node, node]
    doc = {"version": "2.4", "pg_config": {"0": {"desc": node}}, "pg_status": {}, "entries": []}
    return pickle.dumps(doc, protocol=2)


def test_a_pickle_memo_bomb_is_refused_quickly() -> None:
    """Issue 15 point 13: a pickle of a few hundred bytes that shares one object many times
    used to expand exponentially in `str(v)` (3.2 s and 50 MB at 22 levels; every level doubles
    it). Now the walk stops at a node budget: a ParseError at once, whatever the depth."""
    import time

    import pytest

    from slime_hangdoctor.errors import ParseError
    from slime_hangdoctor.parsers.flight_recorder import parse_flight_recorder

    for levels in (22, 40, 60):
        data = _memo_bomb(levels)
        assert len(data) < 1000
        t0 = time.monotonic()
        with pytest.raises(ParseError, match="expands past|nests deeper"):
            parse_flight_recorder(data, rank=0)
        # stopped at the budget (not a timing claim: unbounded, 40 levels would run for days)
        assert time.monotonic() - t0 < 30.0, levels


def test_a_config_value_that_is_a_container_is_not_stringified() -> None:
    import pickle

    from slime_hangdoctor.parsers.flight_recorder import parse_flight_recorder

    doc = {"version": "2.4", "pg_config": {"0": {"desc": [1, 2], "name": "0"}}, "entries": []}
    dump = parse_flight_recorder(pickle.dumps(doc), rank=0)
    assert dict(dump.pg_config["0"]) == {"desc": "<list>", "name": "0"}


# --------------------------------------------------------------------------- issue 22, item 6
# Attacks inside the unpickler: they did their damage while loading, before the node budget ran.

_P61 = 2**61 - 1  # CPython hashes an int modulo this: every multiple of it hashes to 0


def _peak_and_seconds(data: bytes) -> tuple[ParseError, int, float]:
    """The ParseError of parsing `data`, the peak of Python allocations meanwhile, and the time."""
    import time
    import tracemalloc

    tracemalloc.start()
    t0 = time.monotonic()
    try:
        with pytest.raises(ParseError) as caught:
            parse_flight_recorder(data, 0)
    finally:
        seconds = time.monotonic() - t0
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return caught.value, peak, seconds


def test_a_nine_byte_memo_index_bomb_is_refused_without_allocating() -> None:
    """`}` then `LONG_BINPUT 2**26`: the C unpickler sized its memo array to the index (a GiB
    for 9 bytes). The opcode walk refuses an index handed out of order first."""
    data = b"\x80\x02}r" + (2**26).to_bytes(4, "little") + b"."
    assert len(data) == 9
    exc, peak, _ = _peak_and_seconds(data)
    assert peak < 10 * 1024 * 1024, peak
    assert "memo index 67108864 out of order" in str(exc)


@pytest.mark.parametrize("container", ["set", "dict"])
def test_equal_hash_keys_are_refused_before_the_quadratic_build(container: str) -> None:
    """20,000 ints of one hash (`i * (2**61 - 1)`): building the set (240 KB) or dict took
    seconds, quadratically in their number. Sets are refused (a dump holds none) and dict keys
    must be strings or ints of under 61 bits, before anything is built."""
    keys = [i * _P61 for i in range(1, 20_001)]
    payload: object = set(keys) if container == "set" else dict.fromkeys(keys, 0)
    data = pickle.dumps({"version": "2.10", "entries": [], "x": payload}, protocol=4)
    assert len(data) > 200_000
    exc, peak, seconds = _peak_and_seconds(data)
    assert ("EMPTY_SET" if container == "set" else "dict key of type large int") in str(exc)
    assert seconds < 2.0, seconds
    assert peak < 20 * 1024 * 1024, peak


def test_an_os_system_global_runs_nothing(tmp_path: Path) -> None:
    """The classic: GLOBAL os.system, then REDUCE. Refused by the opcode walk (the restricted
    `find_class` behind it refuses it too); the command never runs."""
    target = tmp_path / "pwned"
    data = b"cos\nsystem\n(S'touch " + str(target).encode() + b"'\ntR."
    exc, _, _ = _peak_and_seconds(data)
    assert "refused global os.system" in str(exc)
    assert not target.exists()


def test_a_pickle_that_builds_too_many_objects_is_refused() -> None:
    """Every one- or two-byte opcode builds an object: past MAX_OBJECTS the walk stops."""
    from slime_hangdoctor.parsers.safe_pickle import MAX_OBJECTS

    data = b"\x80\x02]" + b"]a" * (MAX_OBJECTS + 1) + b"."
    with pytest.raises(ParseError, match=f"more than {MAX_OBJECTS} objects"):
        parse_flight_recorder(data, 0)


def test_every_recorded_dump_passes_the_opcode_walk() -> None:
    """The walk accepts every real dump of the fixtures (PyTorch 2.11, protocol 2) and the
    same dumps re-pickled at every protocol (fixtures' transformations use pickle.dumps)."""
    from slime_hangdoctor.parsers.safe_pickle import check_plain_pickle

    root = Path(__file__).resolve().parents[1] / "fixtures"
    dumps = sorted(root.rglob("*.pkl"))
    assert len(dumps) >= 10
    for path in dumps:
        data = path.read_bytes()
        check_plain_pickle(data)
        for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
            check_plain_pickle(pickle.dumps(tf.fr_load_plain(data), protocol=protocol))


@pytest.mark.parametrize(
    "flood",
    [b"h\x00a", b"q\x00"],
    ids=["memo-get-and-append", "memo-overwrite"],
)
def test_opcodes_that_build_nothing_are_capped(flood: bytes) -> None:
    """A list appended to itself by reference, or one memo slot written over and over: no object
    is built, but references fill memory and the walk takes time; past MAX_REFERENCES it stops."""
    from slime_hangdoctor.parsers.safe_pickle import MAX_REFERENCES

    data = b"\x80\x02]q\x00" + flood * (MAX_REFERENCES + 1) + b"."
    with pytest.raises(ParseError, match=f"more than {MAX_REFERENCES} references"):
        parse_flight_recorder(data, 0)
