"""A node's answer as plain bytes (collect/remote.py): a real node sample survives the trip, bytes
that are not an answer are refused, and a node is sent none of the run's secrets.
(The live half, against a real Ray head: tests/integration/test_ray_cluster_collect.py.)"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import msgpack
import pytest

from slime_hangdoctor.bundle import BundleWriter
from slime_hangdoctor.collect.node import export_records
from slime_hangdoctor.collect.options import CollectOptions
from slime_hangdoctor.collect.processes import record_processes
from slime_hangdoctor.collect.remote import (
    GPU_SOURCES,
    SAMPLE_SOURCES,
    Asked,
    RemoteNode,
    add_exported,
    node_options,
    pack_answer,
    read_answer,
    unpack_answer,
)
from slime_hangdoctor.outcome import Outcome
from tests.fixtures.transforms import records_claiming

NODE2 = RemoteNode("b2" * 28, "10.0.0.2")  # the node that answers (the sample's node_ip)


def _real_sample(tmp_path: Path) -> list[tuple[dict[str, object], bytes | None, str]]:
    """What a node's probe exports: a real process scan of this machine."""
    node = BundleWriter(tmp_path / "node", command="node-sample")
    record_processes(node, node_ip="10.0.0.2", sample=0)
    exported = export_records(node)
    assert exported and exported[0][1], exported
    return exported


def test_a_real_sample_survives_the_trip(tmp_path: Path) -> None:
    exported = _real_sample(tmp_path)
    back = unpack_answer(pack_answer(exported))
    assert back == [tuple(item) for item in exported]
    writer = BundleWriter(tmp_path / "b", command="attach")
    assert add_exported(writer, back, Asked(NODE2, 0, SAMPLE_SOURCES)) == len(exported)
    assert [(r.node_ip, r.sample, r.reason) for r in writer.records] == [("10.0.0.2", 0, None)]


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[: len(data) // 2],  # cut
        lambda data: b"\x80\x04\x95" + data,  # a pickle's header in front
        lambda data: msgpack.packb({"not": "a list"}),
        lambda data: msgpack.packb([[1, 2, 3], "x"]),  # items that are no records
    ],
    ids=["cut", "pickle-header", "a-map", "no-records"],
)
def test_bytes_that_are_no_answer_give_no_records(tmp_path: Path, damage: object) -> None:
    data = pack_answer(_real_sample(tmp_path))
    got = unpack_answer(damage(data))  # type: ignore[operator]
    assert not got  # None, or no record to add


def test_a_node_is_sent_no_secret() -> None:
    opts = CollectOptions(
        api_key="hd-key",
        ray_token="hd-token",
        sglang_urls=("http://user:hd-url-pass@10.0.0.2:30000",),
        router_urls=("http://10.0.0.2:9000",),
        extra={"x": "y"},
    )
    sent = node_options(opts)
    text = repr(dataclasses.asdict(sent))
    assert not any(s in text for s in ("hd-key", "hd-token", "hd-url-pass"))
    # everything else a node's sample reads travels unchanged
    kept = {f.name for f in dataclasses.fields(opts)} - {
        "api_key",
        "ray_token",
        "sglang_urls",
        "router_urls",
        "extra",
    }
    assert all(getattr(sent, name) == getattr(opts, name) for name in kept)


def test_a_probe_takes_its_samples_in_order_whatever_order_they_come_in() -> None:
    """A probe that started late is asked for both samples at once, and its threads may pick up
    the second first: it takes the first sample first, and the second only after it (two py-spy
    dumps of one process at once fail). Each answer is a real process scan of this machine."""
    import threading
    import time

    from slime_hangdoctor.collect.node import node_probes
    from slime_hangdoctor.collect.node_probe import NodeSpec
    from slime_hangdoctor.collect.remote import NodeProbe

    probe = NodeProbe(first_sample=0)
    off = frozenset(name for name, _ in node_probes())  # the scan alone
    answers: dict[int, bytes] = {}

    def ask(sample: int) -> None:
        spec = NodeSpec("10.0.0.2", sample, frozenset(), off=off)
        answers[sample] = probe.sample(spec, CollectOptions(), 30.0)

    second = threading.Thread(target=ask, args=(1,))
    second.start()
    time.sleep(0.3)  # (the second is asked first: it must wait, whatever this pause is)
    ask(0)
    second.join(timeout=60)
    starts = {}
    for sample, data in answers.items():
        records = unpack_answer(data)
        assert records, sample
        (scan,) = [rec for rec, _, _ in records if rec["source"] == "processes"]
        starts[sample] = scan["started_at"] + scan["elapsed_s"], scan["started_at"]
    assert starts[0][0] <= starts[1][1], starts  # the first ended before the second began


def _empty_maps(n: int) -> bytes:
    """msgpack of a list of `n` empty maps: one byte (0x80) each, after a list32 header."""
    return b"\xdd" + n.to_bytes(4, "big") + b"\x80" * n


def _records_of_empty_maps(n: int) -> bytes:
    """msgpack of `n` items [record, nil, ""] whose record maps 64 keys to empty maps: every
    list and map within msgpack's length limits, 326 bytes an item."""
    fields = b"".join(b"\xa3" + f"k{i:02d}".encode() + b"\x80" for i in range(64))
    item = b"\x93" + b"\xde" + (64).to_bytes(2, "big") + fields + b"\xc0" + b"\xa0"
    return b"\xdd" + n.to_bytes(4, "big") + item * n


@pytest.mark.parametrize(
    "data",
    [_empty_maps(8 * 1024 * 1024), _records_of_empty_maps(19_999)],
    ids=["8-MiB-of-empty-maps", "records-of-empty-maps"],
)
def test_an_answer_of_many_empty_maps_is_refused_at_a_bounded_cost(data: bytes) -> None:
    """Issue 41 M2: 8 MiB of empty maps (msgpack's default limits are the input's length: 583 MiB
    built, before fa9a874's item check found no record), or 6.5 MB of records each holding 64
    empty maps (111 MiB built on fa9a874, and kept), is refused after a bounded number of objects;
    the node's blind spot says why and how big its answer was."""
    import tracemalloc

    tracemalloc.start()
    try:
        got = unpack_answer(data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert got is None
    assert peak < 64 * 1024 * 1024, f"{peak / 2**20:.0f} MiB to refuse 8 MiB of empty maps"
    exported, why = read_answer(data)
    assert exported is None and why is not None
    assert f"{len(data)} bytes" in why and "over the bounds" in why, why


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data + b"\x80" * 8,  # bytes after the last record
        lambda data: data[:1] + b"\xdd" + (10**6).to_bytes(4, "big") + data[1:],  # a huge list
    ],
    ids=["trailing", "deep-list"],
)
def test_an_answer_past_the_record_format_gives_no_records(tmp_path: Path, damage: object) -> None:
    data = damage(pack_answer(_real_sample(tmp_path)))  # type: ignore[operator]
    exported, why = read_answer(data)
    assert exported is None and why is not None and f"{len(data)} bytes" in why, why


def test_a_node_files_its_records_under_itself_only(tmp_path: Path) -> None:
    """Issue 41 M3: a compromised worker's answer claims the head's node_ip, the other sample, and
    a source a node's sample never produces (the head's Ray state): every record is filed under
    the node that answered, at the sample asked; the foreign source is dropped with a blind spot
    of the node naming it."""
    real = _real_sample(tmp_path)
    claims = records_claiming(real, node_ip="10.0.0.1", sample=1)
    foreign = records_claiming(real, source="ray_dashboard", node_ip="10.0.0.1")
    writer = BundleWriter(tmp_path / "b", command="attach")
    assert add_exported(writer, [*claims, *foreign], Asked(NODE2, 0, SAMPLE_SOURCES)) == len(real)
    kept = [r for r in writer.records if r.outcome is Outcome.OK]
    assert {(r.source, r.node_ip, r.sample) for r in kept} == {("processes", "10.0.0.2", 0)}
    assert all(r.meta["node_id"] == NODE2.node_id for r in writer.records)
    assert all("claimed node '10.0.0.1', sample 1" in str(r.reason) for r in kept)
    (spot,) = [r for r in writer.records if r.outcome is not Outcome.OK]
    assert spot.node_ip == "10.0.0.2" and "'ray_dashboard' (1)" in str(spot.reason), spot
    assert not any(r.source == "ray_dashboard" for r in writer.records)
    # the GPU readings are asked for the window (no sample): a process scan is not one of them
    gpus = BundleWriter(tmp_path / "g", command="attach")
    assert add_exported(gpus, real, Asked(NODE2, None, GPU_SOURCES)) == 0
