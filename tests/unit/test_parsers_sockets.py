"""The sockets parser on real /proc/net/tcp{,6} tables and a real `sockets` artefact of this machine
(tests/fixtures/real/procfs, made by capture_procfs.py), and on named transformations of them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slime_hangdoctor.errors import ParseError
from slime_hangdoctor.parsers.sockets import parse_sockets, parse_tcp_table
from tests.fixtures import transforms as tf

PROCFS = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "procfs"


def _text(name: str) -> str:
    return (PROCFS / name).read_text(encoding="ascii")


def test_whole_ipv4_table_decodes_listening_and_established_rows() -> None:
    rows = parse_tcp_table(_text("net_tcp.txt"), "tcp")
    assert len(rows) == len(_text("net_tcp.txt").splitlines()) - 1
    states = {r.state for r in rows}
    assert {"LISTEN", "ESTABLISHED"} <= states
    loop = [r for r in rows if r.local_ip == "127.0.0.1" and r.state == "ESTABLISHED"]
    assert any(r.rx_queue == 3000 for r in loop)  # the 3000 bytes the capture never read
    assert all(0 < r.local_port < 65536 and r.inode >= 0 for r in rows)


def test_whole_ipv6_table_decodes_mapped_and_loopback_addresses() -> None:
    rows = parse_tcp_table(_text("net_tcp6.txt"), "tcp6")
    assert any(r.local_ip == "::1" and r.rx_queue == 3000 for r in rows)
    # an IPv4 peer of a dual-stack socket is given as plain IPv4
    assert all(not r.local_ip.startswith("::ffff:") for r in rows)


def test_artefact_maps_each_connection_to_its_fd() -> None:
    conns = parse_sockets(_text("sockets.json"))
    assert {c.pid for c in conns} == {int(p) for p in json.loads(_text("sockets.json"))["fds"]}
    assert len(conns) == 4  # two loopback pairs (IPv4, IPv6), both ends held; listeners left out
    assert all(c.socket.state == "ESTABLISHED" for c in conns)
    assert sorted(c.socket.rx_queue for c in conns) == [0, 0, 3000, 3000]
    by_port = {(c.socket.local_ip, c.socket.local_port): c for c in conns}
    for c in conns:  # each end's remote is the other end's local
        peer = by_port[(c.socket.remote_ip, c.socket.remote_port)]
        assert (
            peer.remote == f"{c.socket.local_ip}:{c.socket.local_port}" or ":" in c.socket.local_ip
        )
    assert {c.node_ip for c in conns} == {"10.0.0.1"}


def test_big_endian_byte_order_is_honoured() -> None:
    doc = json.loads(_text("sockets.json"))
    doc["byteorder"] = "big"
    conns = parse_sockets(json.dumps(doc))
    assert all(c.socket.local_ip != "127.0.0.1" for c in conns)  # read as the other order


@pytest.mark.parametrize("n", [20, 200, 240])
def test_table_cut_in_its_header_or_before_a_rows_inode_is_a_parse_error(n: int) -> None:
    with pytest.raises(ParseError):
        parse_tcp_table(tf.truncate_at(_text("net_tcp.txt"), n), "tcp")


@pytest.mark.parametrize("n", range(150, 2000, 37))
def test_a_cut_table_never_yields_a_row_the_whole_table_lacks(n: int) -> None:
    whole = set(parse_tcp_table(_text("net_tcp.txt"), "tcp"))
    try:
        rows = parse_tcp_table(tf.truncate_at(_text("net_tcp.txt"), n), "tcp")
    except ParseError:
        return
    assert set(rows) <= whole


@pytest.mark.parametrize(
    "change",
    [
        lambda d: tf.drop_json_key(d, "fds"),
        lambda d: tf.drop_json_key(d, "tables"),
        lambda d: tf.set_json_path(d, ("byteorder",), "middle"),
        lambda d: tf.set_json_path(d, ("fds", "x"), {"3": 1}),
        lambda d: tf.truncate_at(d, 100),
        lambda d: "",
    ],
)
def test_malformed_artefact_is_a_parse_error(change: object) -> None:
    with pytest.raises(ParseError):
        parse_sockets(change(_text("sockets.json")))  # type: ignore[operator]


def test_invalid_utf8_is_a_parse_error() -> None:
    data = tf.insert_invalid_utf8(_text("sockets.json").encode(), 10)
    with pytest.raises(ParseError):
        parse_sockets(data)
