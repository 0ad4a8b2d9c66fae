"""Fault injection, py-spy: missing, denied (real ptrace denial), hanging, the target exiting
mid-dump or vanishing before the dump; and the guarantee that a target is never left stopped:
after every dump, when py-spy is killed at its timeout, and when the doctor itself is killed
mid-dump.

The target is a stand-in train rank (standins/rank.py, titled `ray::MegatronTrainRayActor.train`)
found by `--local` discovery. `py-spy` is either the real one, or the stand-in
standins/pyspy/py-spy placed first on PATH (it only ever touches the test's own target).

Cases PY1-PY9 of docs/reliability.md."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.reliability.harness import (
    COMMON,
    CliRun,
    Rank,
    assert_clean,
    assert_other_evidence,
    cli_env,
    end_standins,
    find_blind,
    probes,
    pyspy_env,
    rank_running,
    real_pyspy,
    run_cli,
    stopped,
    wait_state,
)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def rank(tmp_path: Path) -> Iterator[Rank]:
    with rank_running(tmp_path) as r:
        yield r


@pytest.fixture
def piddir(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "standin-pids"
    d.mkdir()
    try:
        yield d
    finally:
        end_standins(d)


def attach(rank: Rank, out: Path, env: dict[str, str], *extra: str) -> CliRun:
    run = run_cli("attach", "--local", "--bundle", str(out), *COMMON, *extra, env=env)
    assert_clean(run)
    return run


def my_pyspy(out: Path, rank: Rank) -> list[dict[str, object]]:
    return probes(out, "pyspy", f"pid{rank.pid}")


# --------------------------------------------------------------------------- PY1 missing


def interpreter_without_pyspy(tmp_path: Path) -> Path:
    """A bin/ holding this Python, with the same packages but no py-spy beside it.

    In a virtualenv a bare symlink to the interpreter leaves the venv (Python finds pyvenv.cfg next
    to the path it was started by, not the symlink's target), so it would lose typer and the rest.
    There the copy is a venv of its own: the same pyvenv.cfg and lib/, a bin/ with python3 only."""
    root = tmp_path / "env"
    bindir = root / "bin"
    bindir.mkdir(parents=True)
    (bindir / "python3").symlink_to(sys.executable)
    if sys.prefix != sys.base_prefix:  # a venv: carry its config and site-packages over
        venv = Path(sys.prefix)
        (root / "pyvenv.cfg").write_bytes((venv / "pyvenv.cfg").read_bytes())
        for lib in ("lib", "lib64"):
            if (venv / lib).is_dir() and not (root / lib).exists():
                (root / lib).symlink_to(venv / lib)
    assert not (bindir / "py-spy").exists()
    return bindir


def test_pyspy_missing(tmp_path: Path, rank: Rank) -> None:
    """PY1: no py-spy on PATH nor beside the interpreter: stacks are `unavailable` with the
    install hint; the run goes on with everything else."""
    bindir = interpreter_without_pyspy(tmp_path)
    env = cli_env(extra={"PATH": f"{bindir}:/usr/bin:/bin"})
    out = tmp_path / "b"
    run = run_cli(
        "attach", "--local", "--bundle", str(out), *COMMON, env=env, python=str(bindir / "python3")
    )
    assert_clean(run)
    find_blind(run, f"pyspy pid{rank.pid}: unavailable: py-spy not found on PATH; pip install")
    assert_other_evidence(out)


# --------------------------------------------------------------------------- PY2 denied


@pytest.fixture(scope="module")
def pyspy_as_nobody() -> Iterator[Path]:
    """A `py-spy` that runs the real py-spy as user nobody (setpriv): the real ptrace denial."""
    real = real_pyspy()
    if real is None or shutil.which("setpriv") is None or os.geteuid() != 0:
        pytest.skip("needs root, setpriv and py-spy to run py-spy as an unprivileged user")
    shared = Path(tempfile.mkdtemp(prefix="hd-rel-nobody-"))  # traversable by nobody
    try:
        os.chmod(shared, 0o755)
        copy = shared / "py-spy-real"
        shutil.copy2(real, copy)
        os.chmod(copy, 0o755)
        wrapper = shared / "bin"
        wrapper.mkdir(mode=0o755)
        script = wrapper / "py-spy"
        script.write_text(
            f'#!/bin/sh\nexec setpriv --reuid=65534 --regid=65534 --clear-groups {copy} "$@"\n'
        )
        os.chmod(script, 0o755)
        yield wrapper
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def test_pyspy_denied_by_ptrace(tmp_path: Path, rank: Rank, pyspy_as_nobody: Path) -> None:
    """PY2: the real py-spy, unprivileged, may not ptrace the rank: `denied`, with how to allow it."""
    out = tmp_path / "b"
    run = attach(rank, out, cli_env(path_first=pyspy_as_nobody))
    spot = find_blind(run, f"pyspy pid{rank.pid}: denied:", "Permission Denied")
    assert "CAP_SYS_PTRACE" in spot and "ptrace_scope" in spot
    assert not stopped(rank.state())
    assert_other_evidence(out)


# --------------------------------------------------------------------------- PY3 hanging


def test_pyspy_hanging(tmp_path: Path, rank: Rank, piddir: Path) -> None:
    """PY3: a py-spy that never exits (and ignores SIGTERM) is killed at the probe timeout:
    `timed_out`, and the run ends by its deadline."""
    out = tmp_path / "b"
    run = attach(rank, out, pyspy_env("hang", rank.pid, HD_PYSPY_PIDDIR=str(piddir)))
    find_blind(run, f"pyspy pid{rank.pid}: timed_out: py-spy did not finish within")
    assert not stopped(rank.state())
    assert_other_evidence(out)


# --------------------------------------------------------------------------- PY4, PY5 vanishing


def test_target_exits_mid_dump(tmp_path: Path, rank: Rank) -> None:
    """PY4: the target dies while py-spy reads it (py-spy prints half a dump and fails):
    `process exited`, the half dump is not kept as a stack."""
    out = tmp_path / "b"
    run = attach(rank, out, pyspy_env("midway", rank.pid))
    find_blind(run, f"pyspy pid{rank.pid}: unavailable: process exited")
    assert all(r["artifact"] is None for r in my_pyspy(out, rank))
    assert_other_evidence(out)


def test_target_vanishes_between_discovery_and_probing(tmp_path: Path, rank: Rank) -> None:
    """PY5: the process is listed by discovery, then gone when the real py-spy comes to it."""
    if real_pyspy() is None:
        pytest.skip("needs the real py-spy")
    out = tmp_path / "b"
    run = attach(rank, out, pyspy_env("vanish", rank.pid))
    find_blind(run, f"pyspy pid{rank.pid}: unavailable: process exited")
    scans = probes(out, "processes", "processes")
    assert any(str(rank.pid) in (out / s["artifact"]).read_text() for s in scans if s["artifact"])
    assert_other_evidence(out)


# --------------------------------------------------------------------------- PY6-PY9 never stopped


def test_target_left_stopped_gets_sigcont(tmp_path: Path, rank: Rank, piddir: Path) -> None:
    """PY6: a py-spy that stops its target (SIGSTOP) and hangs: killed at the timeout, and the
    target, found in state T, is resumed; the record says so."""
    out = tmp_path / "b"
    run = attach(rank, out, pyspy_env("sigstop", rank.pid, HD_PYSPY_PIDDIR=str(piddir)))
    find_blind(run, f"pyspy pid{rank.pid}: timed_out", "the target was left stopped; SIGCONT sent")
    assert not stopped(rank.state())
    assert any(r["meta"].get("sigcont") for r in my_pyspy(out, rank))


def test_ptrace_stop_ends_with_pyspy(tmp_path: Path, rank: Rank, piddir: Path) -> None:
    """PY7: a py-spy holding the target in ptrace stop (state t, as a real dump does) and hanging:
    killed at the timeout, the kernel detaches it and the target runs again."""
    out = tmp_path / "b"
    attach(rank, out, pyspy_env("ptrace", rank.pid, HD_PYSPY_PIDDIR=str(piddir)))
    assert not stopped(wait_state(rank, lambda s: not stopped(s), 1.0))


def _spawn_attach(env: dict[str, str], *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "slime_hangdoctor", "attach", "--local", "-f", "json", *extra],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _kill(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=10)


def test_doctor_killed_mid_dump_does_not_leave_target_stopped(rank: Rank, piddir: Path) -> None:
    """PY8: the doctor is SIGKILLed while its py-spy holds the target in ptrace stop and is
    wedged: py-spy runs in its own session and survives us, but its watchdog (`timeout -s KILL`)
    ends it one second past the probe timeout, and the target runs again."""
    probe_timeout = 2.0
    env = pyspy_env("ptrace", rank.pid, HD_PYSPY_PIDDIR=str(piddir))
    proc = _spawn_attach(env, "--timeout", "30", "--probe-timeout", str(probe_timeout))
    try:
        assert stopped(wait_state(rank, stopped, 20.0)), "the stand-in never stopped the target"
    finally:
        _kill(proc)
    killed_at = time.monotonic()
    state = wait_state(rank, lambda s: not stopped(s), probe_timeout + 3.0)
    assert not stopped(state), f"target still {state} {time.monotonic() - killed_at:.1f}s later"


def test_real_pyspy_never_leaves_target_stopped(rank: Rank) -> None:
    """PY9: the real py-spy, and the doctor SIGKILLed as soon as py-spy is attached: whatever
    the moment, the target is not left in T/t."""
    if real_pyspy() is None:
        pytest.skip("needs the real py-spy")
    import psutil

    caught = 0
    for _ in range(3):
        proc = _spawn_attach(
            pyspy_env("log", rank.pid, HD_PYSPY_LOG=os.devnull), "--native", "--timeout", "20"
        )
        try:
            end = time.monotonic() + 15
            while time.monotonic() < end and not _pyspy_running(psutil, proc.pid):
                time.sleep(0.005)
            caught += time.monotonic() < end
        finally:
            _kill(proc)
        assert not stopped(wait_state(rank, lambda s: not stopped(s), 3.0))
    assert caught, "the doctor was never caught with a py-spy running"


def _pyspy_running(psutil: object, pid: int) -> bool:
    try:
        children = psutil.Process(pid).children(recursive=True)  # type: ignore[attr-defined]
    except Exception:
        return False
    for child in children:
        try:
            if "py-spy" in " ".join(child.cmdline()):
                return True
        except Exception:
            continue
    return False


# --------------------------------------------------------------------------- issue 15 point 11


def test_doctor_killed_while_pyspy_left_the_target_sigstopped(rank: Rank, piddir: Path) -> None:
    """PY10: the doctor is SIGKILLed while a wedged py-spy has left its target in `T` (a SIGSTOP
    that the death of a tracer does not undo). Nobody was left to send SIGCONT: the target
    stayed stopped forever. The watcher that runs py-spy in its own process group outlives the
    doctor and resumes the target once `timeout` has ended py-spy."""
    probe_timeout = 2.0
    env = pyspy_env("sigstop", rank.pid, HD_PYSPY_PIDDIR=str(piddir))
    proc = _spawn_attach(env, "--timeout", "30", "--probe-timeout", str(probe_timeout))
    try:
        assert stopped(wait_state(rank, stopped, 20.0)), "the stand-in never stopped the target"
    finally:
        _kill(proc)
    killed_at = time.monotonic()
    state = wait_state(rank, lambda s: not stopped(s), probe_timeout + 4.0)
    assert not stopped(state), f"target still {state} {time.monotonic() - killed_at:.1f}s later"


def test_doctor_killed_while_the_real_pyspy_is_wedged_on_the_target(rank: Rank) -> None:
    """PY11: the real py-spy, attached to the target (TracerPid set) and then wedged (we
    SIGSTOP py-spy itself), and the doctor SIGKILLed: py-spy's `timeout` kills it, the watcher
    checks the target; the target is not left in T/t."""
    if real_pyspy() is None:
        pytest.skip("needs the real py-spy")
    import psutil

    probe_timeout = 2.0
    wedged = False
    for _ in range(5):  # py-spy holds the target for a few ms per dump: catch it attached
        proc = _spawn_attach(
            pyspy_env("log", rank.pid, HD_PYSPY_LOG=os.devnull),
            "--native",
            "--timeout",
            "30",
            "--probe-timeout",
            str(probe_timeout),
        )
        try:
            end = time.monotonic() + 15
            while time.monotonic() < end and not wedged:
                tracer = _tracer_of(rank.pid)
                if tracer and _is_descendant(psutil, tracer, proc.pid):
                    os.kill(tracer, signal.SIGSTOP)  # py-spy wedged while attached
                    wedged = True
                else:
                    time.sleep(0.001)
        finally:
            _kill(proc)
        if wedged:
            break
    assert wedged, "py-spy was never caught attached to the target"
    killed_at = time.monotonic()
    state = wait_state(rank, lambda s: not stopped(s), probe_timeout + 4.0)
    assert not stopped(state), f"target still {state} {time.monotonic() - killed_at:.1f}s later"
    assert _tracer_of(rank.pid) == 0


def _tracer_of(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("TracerPid:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def _is_descendant(psutil: object, pid: int, ancestor: int) -> bool:
    try:
        parents = psutil.Process(pid).parents()  # type: ignore[attr-defined]
    except Exception:
        return False
    return any(p.pid == ancestor for p in parents)
