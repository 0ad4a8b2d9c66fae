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
from slime_hangdoctor.collect.remote import add_exported, node_options, pack_answer, unpack_answer


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
    assert add_exported(writer, back) == len(exported)


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
