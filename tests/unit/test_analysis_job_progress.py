"""Progress is the job's (issue 34 items 1-3), on recorded demo bundles (tests/fixtures/analysis/demo,
provenance in tests/fixtures/README.md); each rule's source removed (`transforms.bundle_without_sources`)
gives the verdict the doctor gave before the rule.

- `weight_load_slow_storage` (items 1 and 3): slime main's disk weight sync; engine 1's scheduler
  reads the checkpoint from slow storage (the demo's user-space file server feeds a FIFO): asleep in
  the pipe read at both samples, its `rchar` up ~1.7 MiB, `read_bytes` 0. Engine 0 finished its load
  and stays paused while the driver's `_reload_rollout_weights_from_disk` still runs engine 1's
  `update_weights_from_disk`.
- `rollout_session_server_blocked` (item 2, miles PR#1602): the rollout's requests go through miles's
  session server, whose one event loop renders session records with `json.dumps` at both samples
  while the RolloutManager's new requests wait unaccepted and the engines still decode long ones.
"""

from __future__ import annotations

import tarfile
from pathlib import Path

from slime_hangdoctor.analysis.parts.request_path.hops import request_path
from slime_hangdoctor.analysis.world import build_world
from slime_hangdoctor.parsers.kernel import KERNEL
from slime_hangdoctor.parsers.ray_state import RAY_STATE
from slime_hangdoctor.parsers.sockets import SOCKETS
from slime_hangdoctor.pipeline import analyse_bundle
from slime_hangdoctor.verdict import Finding, Role, Stage, Status, Verdict
from tests.fixtures import transforms as tf
from tests.unit.demo_bundles import DEMO, diagnosed, unpacked

SLOW_LOAD = "weight_load_slow_storage"
SESSION = "rollout_session_server_blocked"
# pids of the recordings (tests/fixtures/README.md)
SLOW_SCHEDULER = 20102  # engine 1's scheduler, reading through the slow mount
ENGINE_1_ACTOR = 19310
SESSION_SERVER = 4660  # `miles-session-server`, the RolloutManager's spawned child


def _finding(v: Verdict, rule: str) -> Finding:
    found = [f for f in v.findings if f.rule == rule]
    assert len(found) == 1, [f.rule for f in v.findings]
    return found[0]


def _rules(v: Verdict) -> list[str]:
    return [f.rule for f in v.findings]


# --------------------------------------------------------------------------- item 1


def test_a_weight_load_from_slow_storage_is_progress_by_the_bytes_its_reads_return(
    tmp_path: Path,
) -> None:
    v = diagnosed(unpacked(SLOW_LOAD, tmp_path)).verdict
    assert (v.status, v.stage, v.culprits) == (Status.PROGRESSING, Stage.NONE, ()), v.summary
    assert v.extra.get("current_stage") == Stage.WEIGHT_SYNC.value
    io = _finding(v, "storage-io")
    assert len(io.evidence) == 1, io.evidence
    line = io.evidence[0]
    assert line.startswith(f"scheduler http://127.0.0.1:25414 (pid {SLOW_SCHEDULER})"), line
    assert "pipe_read" in line and "by its read/write calls" in line and "slow: " in line, line
    progress = _finding(v, "progress")
    assert progress.evidence[0].startswith("scheduler http://127.0.0.1:25414: slow: "), progress
    assert "MiB/s" in v.summary and "storage-layer bytes 0.0 MiB" in progress.evidence[0]


def test_without_the_kernel_source_the_slow_load_is_called_a_hang(tmp_path: Path) -> None:
    root = unpacked(SLOW_LOAD, tmp_path / "src")
    without = tf.bundle_without_sources(root, tmp_path / "without", frozenset({KERNEL}))
    v = diagnosed(without).verdict
    assert (v.status, v.stage) == (Status.HUNG, Stage.WEIGHT_SYNC), v.summary
    # the engine 1 actor waits on its server's update_weights_from_disk; the process of engine 1
    # that holds is its scheduler, asleep in the slow read (issue 42 item 2: the culprit is the
    # process that holds, with the engine as its group)
    assert [(c.pid, c.process) for c in v.culprits] == [(SLOW_SCHEDULER, "scheduler TP0")]
    assert v.culprits[0].actor_id is not None  # engine 1's actor: its group (pid ENGINE_1_ACTOR)
    assert "storage-io" not in _rules(v)


# the recording's other processes whose readings the variants borrow (sample 1 of the same node):
RUNNING_THEN = 18790  # R, wchan "0": on a CPU or in the run queue
FUTEX_THEN = 18645  # asleep in futex_do_wait


def test_a_reader_caught_running_at_one_sample_still_moves_bytes(tmp_path: Path) -> None:
    """A reader is between two reads part of the time (on a loaded node, waiting in the run queue
    for a CPU): read running at the last sample, its bytes still count as its I/O work."""
    root = unpacked(SLOW_LOAD, tmp_path / "src")
    ran = tf.bundle_with_kernel_reading_as(root, tmp_path / "ran", SLOW_SCHEDULER, 1, RUNNING_THEN)
    v = diagnosed(ran).verdict
    assert (v.status, v.stage, v.culprits) == (Status.PROGRESSING, Stage.NONE, ()), v.summary
    (line,) = _finding(v, "storage-io").evidence
    # where it waits is the sample that shows the wait
    assert f"(pid {SLOW_SCHEDULER}): state S, in anon_pipe_read;" in line, line
    assert "slow: " in line, line


def test_bytes_of_a_reader_asleep_elsewhere_at_one_sample_are_not_io_work(tmp_path: Path) -> None:
    """The same reader read asleep on a futex at the last sample (a lock, a queue: not I/O): its
    read calls' bytes do not count, and the reload is called a hang as without the kernel source."""
    root = unpacked(SLOW_LOAD, tmp_path / "src")
    slept = tf.bundle_with_kernel_reading_as(
        root, tmp_path / "slept", SLOW_SCHEDULER, 1, FUTEX_THEN
    )
    v = diagnosed(slept).verdict
    assert (v.status, v.stage) == (Status.HUNG, Stage.WEIGHT_SYNC), v.summary
    # the engine 1 actor waits on its server's update_weights_from_disk; the process of engine 1
    # that holds is its scheduler, asleep in the slow read (issue 42 item 2: the culprit is the
    # process that holds, with the engine as its group)
    assert [(c.pid, c.process) for c in v.culprits] == [(SLOW_SCHEDULER, "scheduler TP0")]
    assert v.culprits[0].actor_id is not None  # engine 1's actor: its group (pid ENGINE_1_ACTOR)
    assert "storage-io" not in _rules(v)


# --------------------------------------------------------------------------- item 3


def test_engines_paused_by_a_disk_update_in_flight_are_not_left_paused(tmp_path: Path) -> None:
    """slime main's disk path pauses from the driver (whose task runs for the whole job): the
    update is in flight while the driver's update_weights_from_disk still runs on an engine."""
    v = diagnosed(unpacked(SLOW_LOAD, tmp_path)).verdict
    assert "ray_tasks.engine_paused" not in _rules(v)
    in_update = [f for f in v.findings if f.rule == "ray_tasks.engine_paused_in_update"]
    assert len(in_update) == 2, _rules(v)
    for f in in_update:
        assert "update_weights_from_disk on engine actor http://127.0.0.1:25414 (RUNNING)" in (
            f.message
        ), f.message
        assert any("update_weights_from_disk" in e and "RUNNING" in e for e in f.evidence)
    assert any(
        "http://127.0.0.1:25411 is paused by a weight update" in f.message for f in in_update
    )


def test_without_the_running_reload_the_finished_engine_is_left_paused(tmp_path: Path) -> None:
    """The same history with the driver's last update_weights_from_disk ended (as once the
    reload has returned and the continue never came): engine 0 is left paused again."""
    root = unpacked(SLOW_LOAD, tmp_path / "src")
    snapshot = analyse_bundle(root).snapshot
    assert snapshot is not None
    running = [
        t.task_id
        for page in snapshot.joined(RAY_STATE).task_pages
        for t in page.tasks
        if t.method == "update_weights_from_disk" and t.state == "RUNNING"
    ]
    assert running
    ended = tf.bundle_with_task_ended(root, tmp_path / "ended", running[0])
    v = diagnosed(ended).verdict
    paused = [f for f in v.findings if f.rule == "ray_tasks.engine_paused"]
    assert paused and all("is left paused" in f.message for f in paused), _rules(v)


# --------------------------------------------------------------------------- item 2


def test_tokens_behind_a_held_request_path_are_not_the_jobs_progress(tmp_path: Path) -> None:
    v = diagnosed(unpacked(SESSION, tmp_path)).verdict
    assert (v.status, v.stage) == (Status.HUNG, Stage.ROLLOUT_DISPATCH), v.summary
    assert [(c.role, c.pid) for c in v.culprits] == [(Role.ROUTER, SESSION_SERVER)]
    held = _finding(v, "request-path-held")
    (text,) = held.evidence
    assert f"`miles-session-server` (pid {SESSION_SERVER})" in text, text
    assert "CPU-bound in _render_json (slime/rollout/session/core.py" in text, text
    # its loop accepted the RolloutManager's connections between two renders: their requests
    # wait unread in its receive queues
    assert "2909 bytes unread on 3 connection(s) at both samples" in text, text
    counted = _finding(v, "progress-not-counted")
    assert len(counted.evidence) == 2, counted.evidence
    assert all("decode tokens +" in e and "not the job's progress" in e for e in counted.evidence)
    assert "progress" not in _rules(v)


# The same fault recorded by CI's live run on the loaded 2-core box (demo2, tests/fixtures/README.md):
# the session server renders a body at the first sample and writes it at the second, both in its
# handler, while the RolloutManager's requests still wait unread.
WRITING = DEMO.parent / "demo2" / f"{SESSION}_writing.tar.gz"
WRITING_SERVER = 8586


def test_a_handler_caught_rendering_then_writing_holds_the_requests(tmp_path: Path) -> None:
    """Before: its calls differed between the samples, so no hold was seen and the engines' tokens
    (and its own CPU in a moving call chain) made the job progressing (CI's failure)."""
    v = diagnosed(WRITING).verdict
    assert (v.status, v.stage) == (Status.HUNG, Stage.ROLLOUT_DISPATCH), v.summary
    assert [(c.role, c.pid) for c in v.culprits] == [(Role.ROUTER, WRITING_SERVER)]
    (text,) = _finding(v, "request-path-held").evidence
    assert "CPU-bound in SessionServer.handle (slime/rollout/session/server.py:96)" in text, text
    counted = _finding(v, "progress-not-counted").evidence
    # the engines' tokens and the holder's own CPU, none of them the job's progress
    assert len(counted) == 3, counted
    assert any(e.startswith("router: computing (") for e in counted), counted
    assert "progress" not in _rules(v)


# The same fault in the next CI run (demo2): the RolloutManager's client timed out on the requests
# waiting at the first sample, closed them and sent them again on new connections, which the
# session server accepted between two renders and left unread at the second.
RETRIED = DEMO.parent / "demo2" / f"{SESSION}_retried.tar.gz"
RETRIED_SERVER = 20237


def test_requests_given_up_and_sent_again_still_pile_up(tmp_path: Path) -> None:
    """Before: no connection waited at both samples, so no hold was seen, and the engines'
    tokens made the job progressing (CI's failure)."""
    v = diagnosed(RETRIED).verdict
    assert (v.status, v.stage) == (Status.HUNG, Stage.ROLLOUT_DISPATCH), v.summary
    assert [(c.role, c.pid) for c in v.culprits] == [(Role.ROUTER, RETRIED_SERVER)]
    (text,) = _finding(v, "request-path-held").evidence
    assert "332 bytes unread on 2 connection(s) at the last sample" in text, text
    assert "given up by its caller (its connection closed) and sent again" in text, text


def test_requests_given_up_with_none_waiting_at_the_last_sample_still_hold(
    tmp_path: Path,
) -> None:
    """The retried recording with the resent requests read by the last sample (their receive
    queues emptied, `transforms.sockets_with_queue`): the first sample's requests were still given
    up, and the hop is still named, by the first sample's waiting connections."""
    root = _unpacked(RETRIED, tmp_path / "src")
    read = tmp_path / "read"
    tf.sockets_with_queue(root, read, (5092, 39298), samples=(1,))
    tf.sockets_with_queue(read, tmp_path / "both", (5092, 39306), samples=(1,))
    v = diagnosed(tmp_path / "both").verdict
    assert [(c.role, c.pid) for c in v.culprits] == [(Role.ROUTER, RETRIED_SERVER)], v.summary
    (text,) = _finding(v, "request-path-held").evidence
    assert "2 connection(s) from rollout manager (pid 20110) not accepted at the first sample" in (
        text
    ), text
    assert "given up by its caller (its connection closed), none sent again yet" in text, text


def _unpacked(archive: Path, dest: Path) -> Path:
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    return next(p.parent for p in dest.rglob("manifest.json"))


def test_the_request_path_runs_from_the_rollout_manager_to_the_engines(tmp_path: Path) -> None:
    a = analyse_bundle(unpacked(SESSION, tmp_path))
    assert a.snapshot is not None and a.topology is not None
    hops, from_sockets = request_path(build_world(a.snapshot, a.topology))
    assert from_sockets
    labels = {p.pid: p.title.split(" ", 1)[0] for p in hops}
    assert labels[SESSION_SERVER] == "miles-session-server"
    fronts = {p.engine_url for p in hops if p.role is Role.SGLANG_ENGINE}
    assert fronts == {"http://127.0.0.1:31955", "http://127.0.0.1:31958"}, labels
    assert all(p.kind != "actor" for p in hops)  # Ray's own RPC ports are not the request path


def test_without_the_sockets_the_tokens_count_and_the_report_says_what_was_not_seen(
    tmp_path: Path,
) -> None:
    root = unpacked(SESSION, tmp_path / "src")
    without = tf.bundle_without_sources(root, tmp_path / "without", frozenset({SOCKETS}))
    v = diagnosed(without).verdict
    assert v.status is Status.PROGRESSING, v.summary
    progress = _finding(v, "progress")
    assert any("without the request path seen (no sockets source)" in e for e in progress.evidence)


def test_no_other_recording_holds_its_request_path() -> None:
    """Every other recorded demo bundle, hung or progressing, keeps its engines' tokens."""
    for path in sorted(DEMO.glob("*.tar.gz")):
        if path.name == f"{SESSION}.tar.gz":
            continue
        v = analyse_bundle(path).diagnosis.verdict
        assert "progress-not-counted" not in _rules(v), path.name
        assert "request-path-held" not in _rules(v), path.name
