"""py-spy parsers on real dumps (2x H200 NCCL hangs, Ray actors, a local gloo hang)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slime_hangdoctor.errors import ParseError
from slime_hangdoctor.parsers.pyspy import (
    MAX_NAME_CHARS,
    ProcessStack,
    parse_pyspy_json,
    parse_pyspy_text,
)
from tests.fixtures import transforms as tf

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
NCCL = REAL / "gpu-2xh200-nccl-broadcast-hang"
RAY = REAL / "gpu-2xh200-ray-nccl-hang"
GLOO = REAL / "local-cpu-gloo-broadcast-hang"


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _json_sections(path: Path) -> dict[int, str]:
    """pid -> the py-spy --json stdout of that pid, from a concatenated capture file."""
    return {
        s.pid: s.body
        for s in tf.split_capture_sections(_read(path))
        if s.kind == "pyspy" and s.rc in (None, 0)
    }


# --------------------------------------------------------------------------- JSON form


def test_json_run3_hang_waiting_rank_is_active_in_synchronize() -> None:
    stack = parse_pyspy_json(_json_sections(NCCL / "run3_hang.pyspy.json.txt")[571])
    assert stack.pid == 571
    assert stack.native is False
    (thread,) = stack.threads
    assert (thread.name, thread.active, thread.owns_gil) == ("MainThread", True, False)
    assert thread.thread_id == 140661579309376
    assert thread.os_thread_id == 571
    top, caller = thread.frames[0], thread.frames[1]
    assert top.where == "synchronize (torch/cuda/__init__.py:1162)"
    assert top.filename.endswith("site-packages/torch/cuda/__init__.py")
    assert caller.name == "update_weights_from_distributed"
    assert caller.filename == "/job/nccl_hang.py"
    assert [f.name for f in thread.frames][-1] == "<module>"
    assert not any(f.native for f in thread.frames)


def test_json_run3_hang_peer_is_idle_in_its_own_code() -> None:
    stack = parse_pyspy_json(_json_sections(NCCL / "run3_hang.pyspy.json.txt")[572], pid=572)
    (thread,) = stack.threads
    assert thread.active is False
    assert [f.where for f in thread.frames] == [
        "never_join (nccl_hang.py:11)",
        "main (nccl_hang.py:58)",
        "<module> (nccl_hang.py:74)",
    ]


def test_json_ray_actors_and_driver() -> None:
    sections = _json_sections(RAY / "hang" / "pyspy.txt")
    assert set(sections) == {3446, 3445, 3349}
    actor0 = parse_pyspy_json(sections[3445])
    main = next(t for t in actor0.threads if t.name == "MainThread")
    assert main.active is True
    assert main.frames[1].name == "MegatronTrainRayActor.update_weights_from_distributed"
    actor1 = parse_pyspy_json(sections[3446])
    names = {t.name for t in actor1.threads}
    assert {"MainThread", "PythonGCThread"} <= names
    main1 = next(t for t in actor1.threads if t.name == "MainThread")
    assert main1.frames[0].name == "MegatronTrainRayActor.process_rollout_data"
    driver = parse_pyspy_json(sections[3349])
    assert driver.pid == 3349 and driver.threads


def test_json_native_frames_are_marked_and_long_symbols_clipped() -> None:
    stack = parse_pyspy_json(_read(GLOO / "json_native0.txt"))
    assert stack.native is True
    frames = stack.threads[0].frames
    by_name = {f.name: f for f in frames}
    work_wait = by_name["c10d::Work::wait"]
    assert work_wait.native and work_wait.line is None
    assert work_wait.short_filename == "libtorch_cpu.so"
    broadcast = by_name["broadcast"]
    assert not broadcast.native
    assert broadcast.where == "broadcast (torch/distributed/distributed_c10d.py:3151)"
    longest = max(frames, key=lambda f: len(f.name))
    assert longest.name.startswith("pybind11::cpp_function::initialize<")
    assert len(longest.name) == MAX_NAME_CHARS and longest.name.endswith("...")
    assert frames[0].name.startswith("0x") and frames[0].native


def test_json_pid_argument_filters_and_names_empty_dumps() -> None:
    body = _json_sections(NCCL / "run3_hang.pyspy.json.txt")[571]
    with pytest.raises(ParseError, match="no thread belongs to pid 999"):
        parse_pyspy_json(body, pid=999)
    empty = parse_pyspy_json("[]\n", pid=571)
    assert empty == ProcessStack(pid=571, threads=())
    with pytest.raises(ParseError, match="no pid was given"):
        parse_pyspy_json("[]")


def test_json_line_zero_means_unknown() -> None:
    body = _json_sections(NCCL / "run3_hang.pyspy.json.txt")[571]
    variant = tf.set_json_path(body, (0, "frames", 0, "line"), 0)
    assert parse_pyspy_json(variant).threads[0].frames[0].line is None


def test_json_dropped_optional_fields() -> None:
    body = _json_sections(NCCL / "run3_hang.pyspy.json.txt")[571]
    for key in ("thread_name", "os_thread_id", "owns_gil", "short_filename", "module"):
        stack = parse_pyspy_json(tf.drop_json_key(body, key))
        assert stack.threads[0].frames[1].name == "update_weights_from_distributed"
    assert parse_pyspy_json(tf.drop_json_key(body, "thread_name")).threads[0].name is None


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda b: tf.truncate_at(b, len(b) // 2), "not valid JSON"),
        (lambda b: tf.set_json_path(b, (0, "active"), "yes"), "'active' is str"),
        (lambda b: tf.set_json_path(b, (0, "frames"), 3), "no 'frames' list"),
        (lambda b: tf.set_json_path(b, (0, "frames", 0), "synchronize"), "a frame is str"),
        (lambda b: tf.set_json_path(b, (0, "frames", 0, "line"), "1162"), "'line' is str"),
        (lambda b: tf.set_json_path(b, (0, "thread_id"), None), "no 'thread_id'"),
        (lambda b: tf.drop_json_key(b, "frames"), "no 'frames' list"),
        (lambda b: tf.drop_json_key(b, "filename"), "no 'filename'"),
        (lambda b: '{"threads": ' + b + "}", "not a list of threads"),
        (lambda b: "", "empty"),
        (lambda b: "  \n", "empty"),
    ],
)
def test_json_bad_input_raises_parse_error(change: object, match: str) -> None:
    body = _json_sections(NCCL / "run3_hang.pyspy.json.txt")[571]
    with pytest.raises(ParseError, match=match):
        parse_pyspy_json(change(body))  # type: ignore[operator]


def test_json_py_spy_error_output_is_a_parse_error() -> None:
    failed = [s for s in tf.split_capture_sections(_read(RAY / "busy" / "pyspy.txt")) if s.rc == 1]
    assert len(failed) == 2
    for section in failed:
        assert section.body.startswith("Error: Failed to get process executable name")
        with pytest.raises(ParseError):
            parse_pyspy_json(section.body, pid=section.pid)


# --------------------------------------------------------------------------- text form


def test_text_run1_plain_native_nonblocking_dumps_of_both_ranks() -> None:
    stacks = parse_pyspy_text(_read(NCCL / "run1_hang_stacks.txt"))
    assert [s.pid for s in stacks] == [940, 940, 940, 941, 941, 941]
    assert [s.native for s in stacks] == [False, True, False, False, True, False]
    assert {s.title for s in stacks} == {"python3 nccl_hang.py hang"}
    assert {s.python_version for s in stacks} == {"3.12.3"}
    waiting = stacks[0].threads[0]
    assert waiting.active and waiting.thread_id == 940 and waiting.os_thread_id == 940
    assert waiting.frames[0].where == "synchronize (torch/cuda/__init__.py:1162)"
    native = stacks[1].threads[0].frames
    assert native[0].where == "0x7ff7169bab2d ([vdso])" and native[0].native
    assert "cuCtxSynchronize_v2" in [f.name for f in native if f.native]
    python_frames = [f for f in native if not f.native]
    assert [f.name for f in python_frames] == [f.name for f in waiting.frames]
    peer = stacks[4].threads[0]
    assert peer.active is False
    assert peer.frames[0].where == "clock_nanosleep (libc.so.6)" and peer.frames[0].native


def test_text_native_run3_matches_the_json_dump() -> None:
    stacks = parse_pyspy_text(_read(NCCL / "run3_hang.pyspy.native.txt"))
    assert [s.pid for s in stacks] == [571, 572]
    from_json = parse_pyspy_json(_json_sections(NCCL / "run3_hang.pyspy.json.txt")[571])
    python_only = [f.where for f in stacks[0].threads[0].frames if not f.native]
    assert python_only == [f.where for f in from_json.threads[0].frames]


def test_text_ray_worker_traceback_skips_json_and_error_sections() -> None:
    stacks = parse_pyspy_text(_read(RAY / "hang" / "pyspy.txt"))
    assert [s.pid for s in stacks] == [3446, 3445]
    assert {s.title for s in stacks} == {"ray::MegatronTrainRayActor.update_weights"}
    waiting = stacks[1]
    assert [t.name for t in waiting.threads] == ["MainThread", "PythonGCThread"]
    assert [t.thread_id for t in waiting.threads] == [3445, 3536]
    assert waiting.threads[0].active and not waiting.threads[1].active
    assert waiting.threads[0].frames[1].where == (
        "MegatronTrainRayActor.update_weights_from_distributed (driver.py:33)"
    )
    busy = parse_pyspy_text(_read(RAY / "busy" / "pyspy.txt"))
    assert [s.pid for s in busy] == [4121, 4122]  # the two 500 answers hold no dump
    gil = busy[1].threads[0]
    assert (gil.active, gil.owns_gil) == (True, True)  # "active+gil"
    assert gil.frames[0].where == "all_reduce (torch/distributed/distributed_c10d.py:3044)"


def test_text_one_traceback_section_alone() -> None:
    sections = tf.split_capture_sections(_read(RAY / "hang" / "pyspy.txt"))
    body = next(s.body for s in sections if s.kind == "traceback" and s.pid == 3445)
    (stack,) = parse_pyspy_text(body)
    whole = parse_pyspy_text(_read(RAY / "hang" / "pyspy.txt"))[1]
    assert stack == whole


def test_text_native_gloo_long_symbol_is_clipped() -> None:
    text = _read(GLOO / "native0.txt")
    assert max(len(line) for line in text.splitlines()) > 1000  # the real symbol is ~1.5 KB
    (stack,) = parse_pyspy_text(text)
    frames = stack.threads[0].frames
    longest = max(frames, key=lambda f: len(f.name))
    assert len(longest.name) == MAX_NAME_CHARS and longest.native
    assert longest.filename == "libtorch_python.so"
    wait = next(f for f in frames if f.name == "c10d::Work::wait")
    assert wait.native and wait.line is None and wait.filename == "libtorch_cpu.so"
    broadcast = next(f for f in frames if f.name == "broadcast")
    assert not broadcast.native and broadcast.line == 3151
    assert stack.threads[0].active is False  # waiting in pthread_cond_wait = "idle"


def test_text_non_utf8_bytes_decoded_like_the_loader() -> None:
    raw = (NCCL / "run3_hang.pyspy.native.txt").read_bytes()
    at = raw.index(b"update_weights_from_distributed") + 6
    text = tf.decode_like_loader(tf.insert_invalid_utf8(raw, at))
    stacks = parse_pyspy_text(text)
    names = [f.name for f in stacks[0].threads[0].frames]
    assert any(n.startswith("update\ufffd") for n in names)
    assert [s.pid for s in stacks] == [571, 572]


def test_text_truncated_dump_keeps_what_was_written() -> None:
    text = _read(NCCL / "run3_hang.pyspy.native.txt")
    cut = tf.truncate_at(text, text.index("== py-spy dump --native 572"))
    (stack,) = parse_pyspy_text(cut)
    assert stack.pid == 571 and len(stack.threads[0].frames) == 19


@pytest.mark.parametrize(
    "text",
    [
        "",
        "\n\n",
        "Error: Failed to get process executable name. Check that the process is running.\n",
        "Profiling is disabled by default for security reasons.",
        'Thread 940 (active): "MainThread"\n    synchronize (torch/cuda/__init__.py:1162)\n',
        "Process 94",
    ],
)
def test_text_bad_input_raises_parse_error(text: str) -> None:
    with pytest.raises(ParseError):
        parse_pyspy_text(text)


def test_text_garbage_json_is_not_a_dump() -> None:
    body = _json_sections(NCCL / "run3_hang.pyspy.json.txt")[571]
    with pytest.raises(ParseError, match="no 'Process N:' dump"):
        parse_pyspy_text(body)


def test_text_absurd_numbers_are_not_a_crash() -> None:
    raw = (NCCL / "run3_hang.pyspy.native.txt").read_bytes()
    for anchor in (b"Process 571", b"Thread 571", b"nccl_hang.py:17"):
        at = raw.index(anchor) + len(anchor) - 2
        text = tf.decode_like_loader(tf.insert_digits(raw, at))
        stacks = parse_pyspy_text(text)  # the damaged line is skipped, the rest still parses
        assert 572 in [s.pid for s in stacks]


def test_gloo_json_with_and_without_native_agree_on_python_frames() -> None:
    plain = parse_pyspy_json(_read(GLOO / "json0.txt"))
    native = parse_pyspy_json(_read(GLOO / "json_native0.txt"))
    assert (plain.pid, native.pid) == (16732, 17408)  # two runs of the same script
    assert plain.native is False
    python_frames = [f.where for f in native.threads[0].frames if not f.native]
    assert python_frames == [f.where for f in plain.threads[0].frames]
    assert plain.threads[0].frames[0].where == (
        "broadcast (torch/distributed/distributed_c10d.py:3151)"
    )
    (peer,) = parse_pyspy_text(_read(GLOO / "plain1.txt"))
    assert peer.threads[0].active is False
    assert [f.where for f in peer.threads[0].frames] == ["<module> (gloo_hang.py:12)"]
