"""Discovery during collection (collect.node): partial_snapshot parses only what discovery reads,
and sample_node hands the topology of its process scan to `on_scan` before it dumps stacks.

The bundles are the real fixture bundles of tests/fixtures/bundles (re-added record by record to a
live BundleWriter); the processes are real ones titled like Ray workers.
"""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Iterator
from pathlib import Path

import pytest

from slime_hangdoctor.bundle import BundleWriter, ProbeRecord, open_bundle
from slime_hangdoctor.collect.node import DISCOVERY_SOURCES, partial_snapshot, sample_node
from slime_hangdoctor.collect.node_probe import NodeSpec
from slime_hangdoctor.collect.options import CollectOptions, Deadline
from slime_hangdoctor.load import load_snapshot
from slime_hangdoctor.parsers.kernel import KERNEL
from slime_hangdoctor.parsers.nccl_ras import NCCL_RAS
from slime_hangdoctor.parsers.nvml import GPU_SERIES, GpuVia
from slime_hangdoctor.parsers.processes import SPEC as PROCESSES
from slime_hangdoctor.parsers.pyspy import ALL_STACKS, PYSPY
from slime_hangdoctor.parsers.ray_state import RAY_STATE
from slime_hangdoctor.parsers.sockets import SOCKETS
from slime_hangdoctor.topology import Topology, build_topology
from tests.fixtures.transforms import truncate_bytes_at
from tests.unit.live_writer import parked_train_rank, writer_holding

BUNDLES = sorted(
    p.parent
    for p in (Path(__file__).resolve().parents[1] / "fixtures" / "bundles").glob("*/manifest.json")
)


@pytest.mark.parametrize("src", BUNDLES, ids=[p.name for p in BUNDLES])
def test_partial_snapshot_finds_the_same_topology(src: Path, tmp_path: Path) -> None:
    writer = writer_holding(src, tmp_path / "b")
    partial = partial_snapshot(writer)
    with open_bundle(src) as bundle:
        full = load_snapshot(bundle)
    assert build_topology(partial) == build_topology(full)
    ray, full_ray = partial.joined(RAY_STATE), full.joined(RAY_STATE)
    assert (ray.nodes, ray.actors, ray.jobs, ray.tasks) == (
        full_ray.nodes,
        full_ray.actors,
        full_ray.jobs,
        full_ray.tasks,
    )
    assert partial.facts(PROCESSES) == full.facts(PROCESSES)
    assert partial.joined(ALL_STACKS) == ()
    # no NVML series parsed
    assert all(g.via is GpuVia.RAY_SUMMARY for g in partial.joined(GPU_SERIES))


def test_partial_snapshot_leaves_stacks_to_the_analysis(tmp_path: Path) -> None:
    src = next(p for p in BUNDLES if any((p / "raw" / PYSPY).glob("**/*")))
    writer = writer_holding(src, tmp_path / "b", _cut_stacks)
    partial = partial_snapshot(writer)
    assert not [s for s in partial.blind_spots if s.startswith(PYSPY)]
    writer.finish()
    with open_bundle(writer.root) as bundle:
        full = load_snapshot(bundle)
    assert [
        s for s in full.blind_spots if s.startswith(PYSPY) and "could not parse" in s
    ]
    assert {r.source for r in writer.records} - DISCOVERY_SOURCES


def _cut_stacks(rec: ProbeRecord, data: bytes | None) -> bytes | None:
    """py-spy dumps cut in half (`transforms.truncate_bytes_at`), every other record as recorded."""
    if rec.source == PYSPY and data:
        return truncate_bytes_at(data, len(data) // 2)
    return data


@pytest.fixture
def worker() -> Iterator[int]:
    with parked_train_rank() as pid:
        yield pid


def test_on_scan_gets_the_topology_before_the_stacks(worker: int, tmp_path: Path) -> None:
    writer = BundleWriter(tmp_path / "b", command="test")
    seen: list[tuple[Topology, int]] = []

    def on_scan(topo: Topology) -> None:
        stacks_so_far = sum(1 for r in writer.records if r.source == PYSPY)
        seen.append((topo, stacks_so_far))

    spec = NodeSpec(None, 0, roots=frozenset({worker}), off=frozenset({NCCL_RAS}))
    with cf.ThreadPoolExecutor(max_workers=2) as pool:
        topo = sample_node(writer, spec, CollectOptions(), Deadline(30.0), pool, on_scan=on_scan)
    assert len(seen) == 1
    scanned, stacks_then = seen[0]
    assert stacks_then == 0
    assert worker in {m.pid for m in scanned.members}
    assert scanned == topo
    assert [r.target for r in writer.records if r.source == PYSPY] == [f"pid{worker}"]


def test_node_sample_reads_procfs_of_the_scanned_processes(worker: int, tmp_path: Path) -> None:
    """The node task reads the TCP connections and kernel-side state of the processes it scanned
    (on that node: the same task runs on every node of a multi-node job); off when asked."""
    from slime_hangdoctor.parsers.kernel import parse_kernel

    for procfs in (True, False):
        writer = BundleWriter(tmp_path / f"b{procfs}", command="test")
        off = {NCCL_RAS} | (
            set() if procfs else {SOCKETS, KERNEL}
        )
        spec = NodeSpec("10.0.0.5", 1, roots=frozenset({worker}), off=frozenset(off))
        with cf.ThreadPoolExecutor(max_workers=2) as pool:
            sample_node(writer, spec, CollectOptions(), Deadline(30.0), pool)
        recs = {r.source: r for r in writer.records}
        if not procfs:
            assert SOCKETS not in recs and KERNEL not in recs
            continue
        assert (
            recs[SOCKETS].sample == 1
            and recs[SOCKETS].node_ip == "10.0.0.5"
        )
        kernel = recs[KERNEL]
        node = parse_kernel((writer.root / str(kernel.artifact)).read_bytes())
        assert worker in {p.pid for p in node.processes}


CONNECTED = r"""
import socket, sys
server = socket.socket(); server.bind(("127.0.0.1", 0)); server.listen()
client = socket.create_connection(server.getsockname()); peer, _ = server.accept()
client.sendall(b"x" * 1000)  # unread: the connection's receive queue holds it
print(server.getsockname()[1], client.getsockname()[1], flush=True)
sys.stdin.read()
"""


def test_a_node_sample_reads_each_tcp_table_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process scan (listening ports) and the sockets probe (connections and their queues)
    take their rows from one read of each of the kernel's TCP tables per sample: a read of
    /proc/net/tcp walks the kernel's whole connection hash (~13 ms of CPU for tcp and tcp6 on a
    2-core box with 2000 sockets, twice a sample before; issue 26). A real process titled as a
    train rank, listening and holding a connection with unread bytes."""
    import builtins
    import json
    import subprocess

    from tests.titled import titled_python

    proc = subprocess.Popen(
        titled_python("ray::MegatronTrainRayActor.train", CONNECTED),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        listen_port, client_port = map(int, proc.stdout.readline().split())
        reads: list[str] = []
        real_open = builtins.open

        def counting_open(file: object, *args: object, **kwargs: object) -> object:
            if isinstance(file, str) and file.endswith(("/net/tcp", "/net/tcp6")):
                reads.append(file)
            return real_open(file, *args, **kwargs)  # type: ignore[call-overload]

        monkeypatch.setattr(builtins, "open", counting_open)
        writer = BundleWriter(tmp_path / "b", command="test")
        spec = NodeSpec(
            None,
            0,
            roots=frozenset({proc.pid}),
            off=frozenset({NCCL_RAS, PYSPY}),
        )
        with cf.ThreadPoolExecutor(max_workers=2) as pool:
            sample_node(writer, spec, CollectOptions(), Deadline(30.0), pool)
        monkeypatch.undo()
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.kill()
        proc.wait(timeout=10)
    assert sorted(p.rsplit("/", 1)[-1] for p in reads) == ["tcp", "tcp6"], reads
    recs = {r.source: r for r in writer.records}
    rows = json.loads((writer.root / str(recs[PROCESSES.name].artifact)).read_bytes())[
        "processes"
    ]
    assert listen_port in next(r for r in rows if r["pid"] == proc.pid)["listen_ports"]
    doc = json.loads((writer.root / str(recs[SOCKETS].artifact)).read_bytes())
    tcp = next(t["text"] for t in doc["tables"] if t["name"] == "tcp")
    local = {line.split()[1].rsplit(":", 1)[-1] for line in tcp.splitlines()[1:]}
    assert f"{client_port:04X}" in local and f"{listen_port:04X}" in local
