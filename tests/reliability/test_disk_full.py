"""A full disk under the watchdog's files (issue 43, item 2): `check` and `watch` go on, say so
once a run on stderr, and a `watch` keeps its stall clock in memory until it can write again.

The disk is a real one: a 1 MiB tmpfs mounted for the test and filled by writing until the kernel
answers ENOSPC (root only: mount(2) needs CAP_SYS_ADMIN; elsewhere the test is skipped, and
benchmarks/bench_soak.py fills its own for ten minutes of a two-hour soak)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from slime_hangdoctor.collect.options import CollectOptions
from slime_hangdoctor.watchdog.run import CheckOptions, CheckResult, watch_loop


def _fill(path: Path) -> None:
    with path.open("wb") as fh:
        try:
            while True:
                fh.write(b"\0" * 65536)
                fh.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC


@pytest.fixture()
def full_disk(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "disk"
    mnt.mkdir(mode=0o700)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(mnt)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode(errors='replace').strip()}")
    try:
        (mnt / "w").mkdir(mode=0o700)
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


# a user with no processes on this machine: the scan finds no job whatever else runs here (other
# demo jobs of a shared box), so every run's verdict is the same: idle, exit 0
NOBODY = "65533"
WIDE = {**os.environ, "COLUMNS": "500"}  # one line per note on stdout


def _argv(w: Path) -> list[str]:
    return [
        "--local",
        "--uid",
        NOBODY,
        "--state-file",
        str(w / "state" / "state.json"),
        "--prom-file",
        str(w / "prom" / "hangdoctor.prom"),
        "--bundle-dir",
        str(w / "bundles"),
        "--log-file",
        str(w / "log" / "runs.jsonl"),
    ]


def _check(w: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "slime_hangdoctor", "check", *_argv(w)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=WIDE,
    )


def test_check_on_a_full_disk_says_so_and_keeps_its_exit(full_disk: Path) -> None:
    w = full_disk / "w"
    first = _check(w)
    assert first.returncode == 0, first.stderr  # no job on this machine: idle, OK
    _fill(full_disk / "filler")
    full = _check(w)
    # the verdict of the run, not "internal error" (exit 3) from an OSError out of the state write
    assert full.returncode == 0, full.stderr
    assert "internal error" not in full.stderr + full.stdout
    said = "".join(full.stdout.split())  # the report wraps its lines, also inside a long path
    assert f"--state-file{w / 'state' / 'state.json'}notwritten:Nospaceleft" in said
    assert f"--prom-file{w / 'prom' / 'hangdoctor.prom'}notwritten:Nospaceleft" in said
    os.unlink(full_disk / "filler")
    again = _check(w)
    assert again.returncode == 0 and "not written" not in again.stdout + again.stderr


def test_watch_carries_the_state_it_could_not_write(full_disk: Path) -> None:
    w = full_disk / "w"
    _fill(full_disk / "filler")
    results: list[CheckResult] = []
    check = CheckOptions(
        state_file=w / "state" / "state.json",
        bundle_dir=w / "bundles",
        log_file=w / "log" / "runs.jsonl",
    )
    rc = watch_loop(
        None,
        CollectOptions(local=True, uid=int(NOBODY), timeout_s=30.0),
        check,
        interval_s=0.0,
        max_runs=2,
        on_result=results.append,
    )
    assert int(rc) == 0 and len(results) == 2
    for r in results:
        assert r.unsaved_state is not None
        assert any("state.json not written: No space left on device" in n for n in r.notes)
        # a new run log on the full disk: its line's buffered close ended `watch` in the soak
        assert any("runs.jsonl not written: No space left on device" in n for n in r.notes)
    # the second run started from the first's state, not from the (absent) file's default: its
    # run count goes on (a run that read the file would count 1 again)
    first, second = (r.decision for r in results)
    assert first is not None and second is not None
    assert (first.state.runs, second.state.runs) == (1, 2)
