"""The doctor run as root (a cron `check`, an on-call `attach`) cannot be turned against the
machine by what other users control: planted symlinks and foreign directories for the watchdog's
state and lock (issue 15 point 7), `--bundle` onto an existing directory (point 8).

Each case is the attack as a user would meet it, through the real CLI: a symlink planted by an
unprivileged user (uid 65534) in a shared directory, then a root `check` or `attach`. The tests
run as any user; the foreign-owner cases need root to hand a directory to uid 65534."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.reliability.harness import CliRun, assert_clean, run_cli

pytestmark = pytest.mark.timeout(120)

NOBODY = 65534
VICTIM_TEXT = b"root:x:0:0:precious\n"
CHECK = ("check", "--local", "--window", "0.2", "--timeout", "8", "--json")


def _says(run: CliRun, text: str) -> bool:
    """`text` in stderr, whatever the terminal wrapping did to it (a path cut mid-word)."""
    return "".join(text.split()) in "".join(run.stderr.split())


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "victim"
    victim.write_bytes(VICTIM_TEXT)
    return victim


def _nobody_owns(path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to hand a path to another user")
    os.lchown(path, NOBODY, NOBODY)


def test_planted_lock_symlink_never_truncates_its_target(tmp_path: Path) -> None:
    """Point 7: `state.json.lock -> victim` in the state directory: the run refuses the lock
    (O_NOFOLLOW) with a clear message, exit 3; the victim is untouched. Before: truncated."""
    state_dir = tmp_path / "hd"
    state_dir.mkdir(mode=0o700)
    victim = _victim(tmp_path)
    (state_dir / "state.json.lock").symlink_to(victim)
    run = run_cli(*CHECK, "--state-file", str(state_dir / "state.json"))
    assert_clean(run, bound_s=30.0)
    assert run.rc == 3, run.describe()
    assert _says(run, "cannot open the lock") and _says(run, "state.json.lock"), run.describe()
    assert victim.read_bytes() == VICTIM_TEXT


def test_state_directory_of_another_user_is_refused(tmp_path: Path) -> None:
    """Point 7: `/var/tmp/slime-hangdoctor` created first by another user (who then controls
    what is in it): refused with the owner named; nothing written through it."""
    state_dir = tmp_path / "hd"
    state_dir.mkdir(mode=0o755)
    victim = _victim(tmp_path)
    (state_dir / "state.json").symlink_to(victim)
    _nobody_owns(state_dir)
    run = run_cli(*CHECK, "--state-file", str(state_dir / "state.json"))
    assert_clean(run, bound_s=30.0)
    assert run.rc == 3 and _says(run, f"belongs to uid {NOBODY}"), run.describe()
    assert victim.read_bytes() == VICTIM_TEXT
    assert sorted(p.name for p in state_dir.iterdir()) == ["state.json"]


def test_state_directory_others_can_write_is_refused(tmp_path: Path) -> None:
    state_dir = tmp_path / "hd"
    state_dir.mkdir()
    state_dir.chmod(0o777)
    run = run_cli(*CHECK, "--state-file", str(state_dir / "state.json"))
    assert_clean(run, bound_s=30.0)
    assert run.rc == 3 and _says(run, "others may write to it (mode 0777)"), run.describe()
    assert list(state_dir.iterdir()) == []


def test_state_directory_is_created_private_and_state_written_atomically(tmp_path: Path) -> None:
    """Point 7: the directory is created 0700 (even under umask 000), owned by the caller; the
    state is written through a temporary file in it, nothing left beside it."""
    state_dir = tmp_path / "var-tmp" / "slime-hangdoctor"
    run = run_cli(*CHECK, "--state-file", str(state_dir / "state.json"), umask=0)
    assert_clean(run, bound_s=30.0)
    st = state_dir.stat()
    assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.geteuid()
    assert sorted(p.name for p in state_dir.iterdir()) == ["state.json", "state.json.lock"]
    assert stat.S_IMODE((state_dir / "state.json").stat().st_mode) == 0o600


def test_state_file_symlink_is_replaced_not_followed(tmp_path: Path) -> None:
    """A `state.json` symlink (left there by anyone before the directory became private) is
    neither read through nor written through: the run starts afresh and replaces the link."""
    state_dir = tmp_path / "hd"
    state_dir.mkdir(mode=0o700)
    victim = _victim(tmp_path)
    (state_dir / "state.json").symlink_to(victim)
    run = run_cli(*CHECK, "--state-file", str(state_dir / "state.json"))
    assert_clean(run, bound_s=30.0)
    assert victim.read_bytes() == VICTIM_TEXT
    assert not (state_dir / "state.json").is_symlink()


# ---------------------------------------------------------------- --bundle (point 8)

ATTACH = ("attach", "--local", "--window", "0.2", "--timeout", "8", "-f", "json")


def test_out_onto_a_non_empty_directory_is_refused_and_left_alone(tmp_path: Path) -> None:
    """Point 8: `--bundle /tmp` as root chmodded /tmp to 0700 and packed all of it into the tarball.
    Now: refused with a clear message, the directory's mode and content untouched."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    (shared / "someone-elses-file").write_text("not evidence")
    run = run_cli(*ATTACH, "--bundle", str(shared))
    assert_clean(run, bound_s=30.0)
    assert run.rc == 3, run.describe()
    assert _says(run, "it exists and is not empty"), run.describe()
    assert stat.S_IMODE(shared.stat().st_mode) == 0o1777
    assert sorted(p.name for p in shared.iterdir()) == ["someone-elses-file"]
    assert not (tmp_path / "shared.tar.gz").exists()


def test_out_dot_is_a_message_not_a_crash(tmp_path: Path) -> None:
    """Point 8: `--bundle .` crashed (Path('.').with_name). A non-empty cwd is refused; an empty
    one holds the bundle, its tarball beside it, and keeps its mode."""
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("x")
    run = run_cli(*ATTACH, "--bundle", ".", cwd=busy)
    assert_clean(run, bound_s=30.0)
    assert run.rc == 3 and _says(run, "is not empty") and "internal error" not in run.err
    empty = tmp_path / "empty"
    empty.mkdir(mode=0o755)
    empty.chmod(0o755)
    run = run_cli(*ATTACH, "--bundle", ".", cwd=empty)
    assert_clean(run, bound_s=30.0)
    assert (empty / "manifest.json").is_file(), run.describe()
    assert (tmp_path / "empty.tar.gz").is_file()
    assert stat.S_IMODE(empty.stat().st_mode) == 0o755  # not ours to chmod


def test_tarball_is_never_written_through_a_planted_symlink(tmp_path: Path) -> None:
    """`DIR.tar.gz -> victim` planted beside a new --bundle: not followed, the victim kept."""
    victim = _victim(tmp_path)
    (tmp_path / "b.tar.gz").symlink_to(victim)
    run = run_cli(*ATTACH, "--bundle", str(tmp_path / "b"))
    assert_clean(run, bound_s=30.0)
    assert victim.read_bytes() == VICTIM_TEXT
    assert run.rc == 3 and _says(run, "b.tar.gz"), run.describe()


# ---------------------------------------------------------------- --local (point 10)


def _foreign_rank() -> subprocess.Popen[bytes]:
    """A process of uid 65534 titled like a slime train rank (anyone may title a process so)."""
    from tests.reliability.harness import RANK_TITLE

    proc = subprocess.Popen(
        [RANK_TITLE, "600"],
        executable="/bin/sleep",
        stdin=subprocess.DEVNULL,
        user=NOBODY,
        group=NOBODY,
        extra_groups=[],
        cwd="/",
    )
    time.sleep(0.2)
    assert proc.poll() is None, "a process of uid 65534 could not start here"
    return proc


def test_local_as_root_takes_no_other_users_processes(tmp_path: Path) -> None:
    """Point 10: `attach --local` as root took any user's `ray::`/`sglang::` processes (and ran
    py-spy on them). Now only the Ray session owner's (or --uid's): the process of uid 65534 is
    not scanned, not dumped; with `--uid 65534` it is."""
    if os.geteuid() != 0:
        pytest.skip("needs root to start a process as another user")
    foreign = _foreign_rank()
    try:
        run = run_cli(*ATTACH, "--bundle", str(tmp_path / "b"))
        assert_clean(run, bound_s=30.0)
        seen = _scanned_pids(tmp_path / "b")
        assert foreign.pid not in seen, f"root --local took uid {NOBODY}'s process"
        assert not [
            p for p in _probes(tmp_path / "b", "pyspy") if p["target"] == f"pid{foreign.pid}"
        ]
        run = run_cli(*ATTACH, "--uid", str(NOBODY), "--bundle", str(tmp_path / "c"))
        assert_clean(run, bound_s=30.0)
        assert foreign.pid in _scanned_pids(tmp_path / "c"), run.describe()
        uids = {p["meta"].get("uid") for p in _probes(tmp_path / "c", "processes")}
        assert uids == {NOBODY}
    finally:
        foreign.kill()
        foreign.wait(timeout=10)


def _probes(bundle: Path, source: str) -> list[dict[str, Any]]:
    doc = json.loads((bundle / "manifest.json").read_text())
    return [p for p in doc["probes"] if p["source"] == source]


def _scanned_pids(bundle: Path) -> set[int]:
    pids: set[int] = set()
    for rec in _probes(bundle, "processes"):
        if rec.get("artifact"):
            doc = json.loads((bundle / rec["artifact"]).read_text())
            pids |= {int(p["pid"]) for p in doc["processes"]}
    return pids
