"""The processes artefact parser on real process views (2x H200 Ray job, local CPU Ray job)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slime_hangdoctor.errors import ParseError
from slime_hangdoctor.parsers.processes import parse_processes
from tests.fixtures import transforms as tf

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
RAY = REAL / "gpu-2xh200-ray-nccl-hang"
LOCAL = REAL / "local-cpu-ray-2.60-two-actors" / "processes.json"


def _h200(run: str) -> str:
    view = json.loads((RAY / run / "procs.json").read_text(encoding="utf-8"))
    return json.dumps(tf.psutil_view_to_processes(view, node_ip="192.0.2.2", time=None))


def test_h200_ray_titles_survive_the_padding() -> None:
    procs = {p.pid: p for p in parse_processes(_h200("hang"))}
    assert set(procs) == {3445, 3446, 3349}
    rank = procs[3445]
    assert rank.title == "ray::MegatronTrainRayActor.update_weights"
    assert len(rank.cmdline) > 100  # Ray pads argv with empty strings; kept verbatim
    assert rank.status == "running" and rank.node_ip == "192.0.2.2"
    assert procs[3349].title == "python3 driver.py hang"
    assert procs[3349].cpu_seconds is None and procs[3349].listen_ports == ()


def test_local_capture_has_actors_driver_and_supervisor() -> None:
    procs = {p.pid: p for p in parse_processes(LOCAL.read_text(encoding="utf-8"))}
    titles = {p.title: p for p in procs.values()}
    actor = titles["ray::RolloutManager.generate"]
    assert actor.env["RAY_JOB_ID"] == "02000000" and actor.env["NCCL_DEBUG"] == "WARN"
    assert actor.listen_ports and actor.listen_addrs[0].endswith(f":{actor.listen_ports[0]}")
    assert "ray::MegatronTrainRayActor.train" in titles
    driver = titles["python driver.py"]
    assert procs[driver.ppid or 0].title == "/bin/sh -c python driver.py"
    assert titles["ray::JobSupervisor"].num_threads
    assert all(p.node_ip == "192.0.2.2" for p in procs.values())
    assert not [t for t in titles if t.startswith(("ray::DashboardAgent", "ray::IDLE"))]


def test_listen_addrs_may_be_absent() -> None:
    text = tf.drop_json_key(LOCAL.read_text(encoding="utf-8"), "listen_addrs")
    assert all(p.listen_addrs == () for p in parse_processes(text))


def test_null_node_ip() -> None:
    text = tf.set_json_path(LOCAL.read_text(encoding="utf-8"), ("node_ip",), None)
    assert {p.node_ip for p in parse_processes(text)} == {None}


@pytest.mark.parametrize(
    ("path", "value", "match"),
    [
        (("processes",), {}, "processes"),
        (("processes", 0), "x", "entry 0"),
        (("processes", 0, "pid"), "12", "pid"),
        (("processes", 0, "pid"), None, "pid"),
        (("processes", 0, "cmdline"), "ray::X", "cmdline"),
        (("processes", 0, "listen_ports"), [70000], "port"),
        (("processes", 0, "env"), {"A": 1}, "env"),
        (("processes", 0, "cpu_seconds"), "1.0", "cpu_seconds"),
        (("node_ip",), 5, "node_ip"),
    ],
)
def test_wrong_types_raise_parse_error(path: tf.JsonPath, value: object, match: str) -> None:
    text = tf.set_json_path(LOCAL.read_text(encoding="utf-8"), path, value)
    with pytest.raises(ParseError, match=match):
        parse_processes(text)


def test_truncated_and_undecodable() -> None:
    text = LOCAL.read_text(encoding="utf-8")
    for n in (0, 1, len(text) // 2, len(text) - 1):
        with pytest.raises(ParseError):
            parse_processes(tf.truncate_at(text, n))
    with pytest.raises(ParseError, match="UTF-8"):
        parse_processes(tf.insert_invalid_utf8(text.encode(), 10))


@pytest.mark.parametrize("value", [None, "x", [], {}, -1, 2.5])
def test_any_value_replaced_gives_facts_or_parse_error(value: object) -> None:
    text = LOCAL.read_text(encoding="utf-8")
    for path in tf.json_paths(text):
        try:
            parse_processes(tf.set_json_path(text, path, value))
        except ParseError:
            pass
