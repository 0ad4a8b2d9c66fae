"""The kernel parser on a real `kernel` artefact of this machine (a process, and a child whose
spawning thread sat in D state; the kernel log after a real cgroup OOM kill) and real procfs files;
tests/fixtures/real/procfs, made by capture_procfs.py --oom."""

from __future__ import annotations

from pathlib import Path

import pytest

from slime_hangdoctor.errors import ParseError
from slime_hangdoctor.parsers.kernel import (
    parse_io,
    parse_kernel,
    parse_kmsg_record,
    parse_schedstat,
    parse_stat,
    parse_wchan,
)
from tests.fixtures import transforms as tf

PROCFS = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "procfs"


def _text(name: str) -> str:
    return (PROCFS / name).read_text(encoding="utf-8")


def test_raw_files_of_a_thread_in_disk_sleep() -> None:
    pid, name, state = parse_stat(_text("proc_stat_d.txt"))
    assert state == "D" and name == "python" and pid > 0
    assert parse_wchan(_text("proc_wchan_d.txt")) == "kernel_clone"
    io = parse_io(_text("proc_io.txt"))
    assert io.write_bytes == 0 and io.rchar > 0


def test_artefact_names_the_blocked_thread_io_shm_and_oom_lines() -> None:
    node = parse_kernel(_text("kernel.json"))
    assert len(node.processes) == 2
    blocked = [p for p in node.processes if p.in_disk_sleep]
    assert len(blocked) == 1
    (thread,) = blocked[0].blocked_threads
    assert thread.state == "D" and thread.wchan == "kernel_clone"
    assert blocked[0].state == "S" and blocked[0].wchan == "futex_do_wait"
    assert all(p.io is not None for p in node.processes)
    assert node.shm is not None and 0 < node.shm.free_bytes <= node.shm.total_bytes
    assert node.log is not None and node.log.readable
    texts = [line.text for line in node.log.oom_lines]
    assert any("invoked oom-killer" in t for t in texts)
    assert any(t.startswith("Memory cgroup out of memory: Killed process") for t in texts)
    assert all(line.age_s is not None and 0 <= line.age_s < 10 for line in node.log.oom_lines)


def test_command_names_with_parentheses_and_spaces() -> None:
    """A renamed thread (prctl) may hold ') ' itself: the state follows the LAST parenthesis."""
    stat = _text("proc_stat_d.txt").replace("(python)", "(py (x) D y)", 1)
    _, name, state = parse_stat(stat)
    assert name == "py (x) D y" and state == "D"


def test_kmsg_record_without_a_prefix_keeps_its_text() -> None:
    line = parse_kmsg_record("no prefix here", 10.0)
    assert line.text == "no prefix here" and line.age_s is None


def test_unreadable_kernel_log_is_kept_as_such() -> None:
    text = tf.set_json_path(_text("kernel.json"), ("kmsg",), {"readable": False, "error": "EPERM"})
    node = parse_kernel(text)
    assert node.log is not None and not node.log.readable and node.log.why_not == "EPERM"


@pytest.mark.parametrize(
    "change",
    [
        lambda d: tf.drop_json_key(d, "processes"),
        lambda d: tf.set_json_path(d, ("shm", "free"), -1),
        lambda d: tf.set_json_path(d, ("uptime_s",), "soon"),
        lambda d: tf.truncate_at(d, 300),
        lambda d: "[]",
    ],
)
def test_malformed_artefact_is_a_parse_error(change: object) -> None:
    with pytest.raises(ParseError):
        parse_kernel(change(_text("kernel.json")))  # type: ignore[operator]


@pytest.mark.parametrize("n", [3, 10, 15])
def test_stat_cut_before_its_state_is_a_parse_error(n: int) -> None:
    with pytest.raises(ParseError):
        parse_stat(tf.truncate_at(_text("proc_stat_d.txt"), n))


def test_stat_cut_after_its_state_still_gives_it() -> None:
    assert parse_stat(tf.truncate_at(_text("proc_stat_d.txt"), 40))[2] == "D"


def test_io_without_byte_counters_is_a_parse_error() -> None:
    with pytest.raises(ParseError):
        parse_io("rchar: 1\nwchar: 2\n")


def test_schedstat_is_run_and_wait_nanoseconds_and_anything_else_a_parse_error() -> None:
    """/proc/<pid>/schedstat of this process (a real reading), and cut variants of it."""
    text = Path("/proc/self/schedstat").read_text() if Path("/proc/self/schedstat").exists() else ""
    if not text:
        pytest.skip("no /proc/self/schedstat here")
    sched = parse_schedstat(text)
    run, wait = (int(f) for f in text.split()[:2])
    assert (sched.run_ns, sched.wait_ns) == (run, wait)
    for bad in (tf.truncate_at(text, text.index(" ")), "x y z", ""):
        with pytest.raises(ParseError):
            parse_schedstat(bad)
