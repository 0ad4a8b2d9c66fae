"""NCCL RAS parser on real NCCL 2.28.9 answers (2x H200, plain processes and Ray actors)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slime_hangdoctor.errors import ParseError
from slime_hangdoctor.parsers.nccl_ras import (
    RasCommunicator,
    RasRank,
    RasReport,
    parse_ras,
    parse_ras_json_body,
    parse_ras_text_body,
)
from tests.fixtures import transforms as tf

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
NCCL = REAL / "gpu-2xh200-nccl-broadcast-hang"
RAY = REAL / "gpu-2xh200-ray-nccl-hang"


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _body(path: Path, part: str) -> str:
    doc, _ = json.JSONDecoder().raw_decode(_read(path))
    body: str = doc[part]["body"]
    return body


def _only(report: RasReport) -> RasCommunicator:
    (comm,) = report.communicators
    return comm


def _rank(comm: RasCommunicator, number: int) -> RasRank:
    return next(r for r in comm.ranks if r.rank == number)


# --------------------------------------------------------------------------- artefacts


def test_run3_hang_names_the_rank_that_never_joined_the_broadcast() -> None:
    report = parse_ras(_read(NCCL / "run3_hang.ras.json"))
    assert (report.source_format, report.repaired, report.nccl_version) == ("json", False, "2.28.9")
    comm = _only(report)
    assert (comm.hash, comm.size, comm.status, comm.errors) == (
        "0xe95c687864ce5cf7",
        2,
        "RUNNING",
        "MISMATCH",
    )
    r0, r1 = _rank(comm, 0), _rank(comm, 1)
    assert (r0.pid, r0.host, r0.cuda_dev, r0.nvml_dev) == (571, "192.0.2.2", 0, 0)
    assert (r1.pid, r1.cuda_dev, r1.nvml_dev) == (572, 1, 1)
    assert r0.collective_counts["Broadcast"] == 1 and r1.collective_counts["Broadcast"] == 0
    assert r0.collective_counts["AllReduce"] == r1.collective_counts["AllReduce"] == 1
    assert not r0.missing and not r1.missing
    assert "Communicator ranks have different Broadcast operation counts" in comm.messages


def test_run3_train_stuck_mismatch_is_on_all_reduce() -> None:
    comm = _only(parse_ras(_read(NCCL / "run3_train_stuck.ras.json")))
    assert comm.errors == "MISMATCH"
    assert [r.collective_counts["AllReduce"] for r in comm.ranks] == [2, 1]
    assert [r.pid for r in comm.ranks] == [708, 709]


def test_busy_all_reduce_is_ok_with_equal_counts() -> None:
    comm = _only(parse_ras(_read(NCCL / "run2_ras_busy.json")))
    assert (comm.status, comm.errors, comm.messages) == ("RUNNING", "OK", ())
    assert [r.collective_counts["AllReduce"] for r in comm.ranks] == [6179, 6179]


def test_peer_killed_6s_is_incomplete_and_repaired() -> None:
    report = parse_ras(_read(NCCL / "run2_ras_hang_peerkilled_6s.json"))
    assert report.repaired is True and report.source_format == "json"
    comm = _only(report)
    assert comm.errors == "INCOMPLETE"
    r1 = _rank(comm, 1)
    assert (r1.missing, r1.considered_dead, r1.pid, r1.nvml_dev) == (True, False, 675, 1)
    assert r1.collective_counts == {}
    assert _rank(comm, 0).collective_counts["Broadcast"] == 1
    assert "Missing communicator data from 1 rank" in comm.messages


def test_peer_killed_80s_is_considered_dead() -> None:
    comm = _only(parse_ras(_read(NCCL / "run2_ras_hang_peerkilled_80s.json")))
    assert _rank(comm, 1).considered_dead is True and _rank(comm, 1).missing


def test_comma_repair_gives_the_same_facts_as_hand_fixed_json() -> None:
    raw = _read(NCCL / "run2_ras_hang_peerkilled_6s.json")
    repaired = parse_ras(raw)
    fixed = parse_ras(tf.ras_fix_missing_comma(raw))
    assert fixed.repaired is False and repaired.repaired is True
    assert fixed.communicators == repaired.communicators


def test_ray_hang_cuda_and_nvml_device_differ() -> None:
    comm = _only(parse_ras(_read(RAY / "hang" / "ras.json")))
    r1 = _rank(comm, 1)
    assert (r1.pid, r1.cuda_dev, r1.nvml_dev, r1.collective_counts["Broadcast"]) == (3446, 0, 1, 0)
    assert _rank(comm, 0).pid == 3445 and comm.errors == "MISMATCH"


def test_ray_busy_unpadded_hash_and_group_status() -> None:
    comm = _only(parse_ras(_read(RAY / "busy" / "ras.json")))
    assert comm.hash == "0x36735bf8be4c1f8"  # JSON prints %lx: 15 digits
    assert (comm.status, comm.errors) == ("RUNNING", "OK")


def test_no_job_is_a_parse_error_with_the_reason() -> None:
    with pytest.raises(ParseError, match="did not answer: ConnectionRefusedError"):
        parse_ras(_read(NCCL / "run2_ras_nojob.json"))


def test_truncated_json_body_falls_back_to_text() -> None:
    report = parse_ras(tf.ras_truncate_json_body(_read(NCCL / "run3_hang.ras.json"), 300))
    assert report.source_format == "text" and report.nccl_version == "2.28.9"
    comm = _only(report)
    assert (comm.hash, comm.status, comm.errors) == ("0xe95c687864ce5cf7", "RUNNING", "MISMATCH")
    r0, r1 = _rank(comm, 0), _rank(comm, 1)
    assert (r0.pid, r0.launched_up_to, dict(r0.collective_counts)) == (571, 1, {"Broadcast": 1})
    assert (r1.pid, r1.launched_up_to, dict(r1.collective_counts)) == (572, 0, {"Broadcast": 0})


def test_one_part_only() -> None:
    raw = _read(NCCL / "run3_hang.ras.json")
    text_only = parse_ras(tf.ras_drop_part(raw, "json"))
    assert text_only.source_format == "text" and _only(text_only).errors == "MISMATCH"
    json_only = parse_ras(tf.ras_drop_part(raw, "text"))
    comm = _only(json_only)
    assert json_only.source_format == "json" and comm.status is None and comm.messages == ()
    assert _rank(comm, 1).collective_counts["Broadcast"] == 0


def test_error_part_next_to_a_good_body() -> None:
    raw = _read(NCCL / "run3_hang.ras.json")
    broken = tf.ras_map_part(raw, "json", lambda p: {"error": "TimeoutError: timed out"})
    assert parse_ras(broken).source_format == "text"


# --------------------------------------------------------------------------- bodies


def test_json_body_repair_directly() -> None:
    body = _body(NCCL / "run2_ras_hang_peerkilled_80s.json", "json")
    with pytest.raises(ValueError):
        json.loads(body)  # the real body is malformed
    report = parse_ras_json_body(body)
    assert report.repaired and _rank(_only(report), 1).considered_dead is True


def test_text_body_incomplete_and_dead_ranks() -> None:
    six = _only(parse_ras_text_body(_body(NCCL / "run2_ras_hang_peerkilled_6s.json", "text")))
    assert (six.status, six.errors) == ("RUNNING", "INCOMPLETE")
    (missing,) = six.ranks
    assert (missing.rank, missing.pid, missing.missing, missing.considered_dead) == (
        1,
        675,
        True,
        False,
    )
    eighty = _only(parse_ras_text_body(_body(NCCL / "run2_ras_hang_peerkilled_80s.json", "text")))
    assert eighty.ranks[0].considered_dead is True


def test_text_body_nvml_index_and_ok_groups() -> None:
    ray = _only(parse_ras_text_body(_body(RAY / "hang" / "ras.json", "text")))
    r1 = _rank(ray, 1)
    assert (r1.cuda_dev, r1.nvml_dev, r1.pid, r1.host) == (0, 1, 3446, "192.0.2.2")
    busy = _only(parse_ras_text_body(_body(NCCL / "run2_ras_busy.json", "text")))
    assert busy == RasCommunicator("#0", 2, (), "RUNNING", "OK")


@pytest.mark.parametrize(
    "body",
    ["", "garbage", "SERVER PROTOCOL 2\n", "Traceback (most recent call last):\n  File x\n"],
)
def test_text_body_garbage(body: str) -> None:
    with pytest.raises(ParseError):
        parse_ras_text_body(body)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda b: "", "empty"),
        (lambda b: "[]", "no 'communicators'"),
        (lambda b: tf.truncate_at(b, 400), "not valid JSON"),
        (lambda b: tf.set_json_path(b, ("communicators",), 3), "not a list"),
        (lambda b: tf.set_json_path(b, ("communicators", 0, "hash"), 7), "no 'hash'"),
        (lambda b: tf.set_json_path(b, ("communicators", 0, "ranks", 0), "r"), "not an object"),
        (lambda b: tf.set_json_path(b, ("communicators", 0, "ranks", 0, "pid"), "571"), "pid"),
        (lambda b: tf.drop_json_key(b, "rank"), "no 'rank'"),
        (
            lambda b: tf.set_json_path(
                b, ("communicators", 0, "ranks", 0, "collective_counts", "Broadcast"), "1"
            ),
            "collective count",
        ),
    ],
)
def test_json_body_bad_input(change: object, match: str) -> None:
    body = _body(NCCL / "run3_hang.ras.json", "json")
    with pytest.raises(ParseError, match=match):
        parse_ras_json_body(change(body))  # type: ignore[operator]


def test_json_body_unknown_pid_and_host() -> None:
    body = _body(NCCL / "run3_hang.ras.json", "json")
    body = tf.set_json_path(body, ("communicators", 0, "ranks", 1, "pid"), -1)
    body = tf.set_json_path(body, ("communicators", 0, "ranks", 1, "host"), "unknown")
    r1 = _rank(_only(parse_ras_json_body(body)), 1)
    assert (r1.pid, r1.host) == (None, None)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not json",
        "[1]",
        '{"text": "x"}',
        '{"text": {"body": "garbage"}, "json": {"body": "{"}}',
    ],
)
def test_artefact_bad_input(text: str) -> None:
    with pytest.raises(ParseError):
        parse_ras(text)


def test_artefact_truncated() -> None:
    raw = _read(NCCL / "run3_hang.ras.json")
    with pytest.raises(ParseError):
        parse_ras(tf.truncate_at(raw, len(raw) // 2))


def test_text_body_absurd_numbers_are_not_a_crash() -> None:
    raw = _body(NCCL / "run3_hang.ras.json", "text").encode()
    at = raw.index(b"by process 571") + len(b"by process ")
    body = tf.decode_like_loader(tf.insert_digits(raw, at))
    comm = _only(parse_ras_text_body(body))
    assert [r.rank for r in comm.ranks] == [1]  # the damaged rank line is skipped
    assert _rank(comm, 1).pid == 572 and comm.errors == "MISMATCH"
