"""`check` (one cron tick) and `watch` (a loop for systemd): detect a stall, keep evidence, alert."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import pwd
import secrets
import shutil
import signal
import stat
import subprocess
import time
import traceback
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slime_hangdoctor.collect.options import CHECK_DEFAULTS, CollectOptions
from slime_hangdoctor.errors import HangDoctorError
from slime_hangdoctor.safe_fs import (
    CLOEXEC,
    NOFOLLOW,
    NONBLOCK,
    UnsafePath,
    open_dir,
    open_private_dir,
)
from slime_hangdoctor.verdict import (
    Diagnosis,
    ExitCode,
    unknown_verdict,
)
from slime_hangdoctor.watchdog.decide import (
    CheckDecision,
    annotated,
    decide_check,
    expecting_job,
    with_problem,
)
from slime_hangdoctor.watchdog.private_files import private_dir
from slime_hangdoctor.watchdog.state import (
    DEFAULT_STATE_FILE,
    CounterPlan,
    LockHeld,
    WatchState,
    load_state,
    run_lock,
    save_state,
)

if TYPE_CHECKING:
    from slime_hangdoctor.analysis.counters import CounterJudgement

# What a run imports is what it needs: the counters-only look (watchdog/counter_look.py) answers
# most runs of a progressing job, and neither the collector nor the analysis is imported for it
# (watchdog/look.py, imported when that look does not answer).

HOOK_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class CheckOptions:
    state_file: Path
    stall_after_s: float = CHECK_DEFAULTS.stall_after_s
    bundle_dir: Path | None = None
    keep_bundles: int = CHECK_DEFAULTS.keep_bundles
    on_stall_native: bool = False
    on_stall_flight_recorder: bool = False
    on_stall_exec: str | None = None
    prom_file: Path | None = None
    log_file: Path | None = None
    # `--expect-job`: a run that finds no job is UNKNOWN (exit 3), not IDLE (exit 0)
    expect_job: bool = False


@dataclass(frozen=True)
class CheckResult:
    diagnosis: Diagnosis
    exit_code: ExitCode
    decision: CheckDecision | None = None
    bundle: Path | None = None
    hook_rc: int | None = None
    notes: tuple[str, ...] = ()
    # the state this run decided, where the state file could not be written (a full disk): `watch`
    # carries it into its next run, so that a stall alerts once however long the disk stays full
    unsaved_state: WatchState | None = None


def run_check(
    address: str | None,
    opts: CollectOptions,
    check: CheckOptions,
    carried: WatchState | None = None,
) -> CheckResult:
    """One watchdog run under the state-file lock. Never raises for a bad state file or a dead job.

    The default state directory (/var/tmp/slime-hangdoctor) is one any user can create first: if
    it is not safe to use (another user's, writable by others, a symlink), the run says why and
    keeps its state in the caller's own state directory instead (`fallback_state_file`), so that a
    planted directory cannot stop every root check. A --state-file given is used or refused.

    `carried`: the state an earlier run of this process decided but could not write (see
    CheckResult.unsaved_state); it stands in for the state file's, which is older."""
    early: tuple[str, ...] = ()
    if check.state_file == DEFAULT_STATE_FILE:
        try:
            private_dir(check.state_file.parent)
        except UnsafePath as exc:
            fallback = fallback_state_file()
            early = (f"{exc}; the state is kept in {fallback} instead",)
            check = dataclasses.replace(check, state_file=fallback)
    try:
        with run_lock(check.state_file):
            return _check_locked(address, opts, check, early, carried)
    except LockHeld as exc:
        verdict = unknown_verdict(
            f"Skipped: another check is still running (lock {exc} held); runs never pile up.",
        )
        return CheckResult(Diagnosis(verdict), ExitCode.UNKNOWN, notes=("lock held", *early))


def fallback_state_file() -> Path:
    """The caller's own state file: $XDG_STATE_HOME/slime-hangdoctor/state.json, else
    ~/.local/state/slime-hangdoctor/state.json (the home directory of the passwd entry: a cron
    job's environment may lack HOME). No other user can create or write there."""
    xdg = os.environ.get("XDG_STATE_HOME", "")
    if not os.path.isabs(xdg):
        xdg = os.path.join(pwd.getpwuid(os.geteuid()).pw_dir, ".local", "state")
    return Path(xdg) / "slime-hangdoctor" / "state.json"


def _check_locked(
    address: str | None,
    opts: CollectOptions,
    check: CheckOptions,
    early: tuple[str, ...] = (),
    carried: WatchState | None = None,
) -> CheckResult:
    started = time.monotonic()
    now = time.time()
    loaded = load_state(check.state_file)
    previous = loaded.state if carried is None else carried
    notes = [*early, *([loaded.problem] if loaded.problem and carried is None else [])]
    target = address or ""
    counted = _counter_look(previous, target, opts, now)
    outcomes: Counter[tuple[str, str]] = Counter()
    if counted is not None and counted.verdict is not None:
        diagnosis = Diagnosis(counted.verdict)
        outcomes.update(counted.outcomes)
        decision = decide_check(
            counted.verdict,
            {**previous.markers, **counted.markers},
            previous,
            now=now,
            stall_after_s=check.stall_after_s,
            window_moved=True,
            counter_plan=previous.counter_plan,
        )
    else:
        from slime_hangdoctor.watchdog.look import counter_plan, look

        left = opts.timeout_s - (time.monotonic() - started)
        seen = look(address, dataclasses.replace(opts, timeout_s=max(1.0, left)), previous, now)
        analysed = seen.analysed
        if analysed.manifest is not None:
            outcomes.update((p.source, p.outcome.value) for p in analysed.manifest.probes)
        diagnosis = analysed.diagnosis
        if counted is not None:
            from slime_hangdoctor.analysis.counters import counters_first

            diagnosis = counters_first(diagnosis, counted.why)
        decision = decide_check(
            diagnosis.verdict,
            seen.markers,
            previous,
            now=now,
            stall_after_s=check.stall_after_s,
            window_moved=analysed.work_moved is True,
            stall_look=seen.stall_look(now),
            counter_plan=counter_plan(analysed, target, now),
        )
    diagnosis, decision = expecting_job(diagnosis, decision, check.expect_job)
    diagnosis = annotated(diagnosis, decision, notes)
    bundle: Path | None = None
    hook_rc: int | None = None
    if decision.new_stall:
        bundle, problem = _keep_evidence(address, opts, check, now)
        if problem is not None:
            notes.append(problem)
            diagnosis = with_problem(diagnosis, problem)
        hook_rc = _run_hook(check.on_stall_exec, diagnosis, decision, bundle)
    stall_bundle = _stall_bundle(decision, bundle, previous.stall_bundle)
    state = dataclasses.replace(decision.state, stall_bundle=stall_bundle)
    unsaved: WatchState | None = None
    try:
        save_state(check.state_file, state)
    except (UnsafePath, OSError) as exc:
        unsaved = state
        problem = f"--state-file {check.state_file} not written: {_why(exc)}{_KEPT_IN_MEMORY}"
        notes.append(problem)
        diagnosis = with_problem(diagnosis, problem, "watchdog.state_file")
    result = CheckResult(
        diagnosis, decision.exit_code, decision, bundle, hook_rc, tuple(notes), unsaved
    )
    return _report(check, result, outcomes, now, time.monotonic() - started, stall_bundle)


# what a run that cannot write its state does with it (watch_loop carries it; a cron `check`
# cannot, and its next run starts from the older state on disk)
_KEPT_IN_MEMORY = (
    " (a `watch` keeps the stall clock in memory until it can write again; a `check` run from "
    "cron or a timer starts its next run from the older state on disk)"
)


def _report(
    check: CheckOptions,
    result: CheckResult,
    outcomes: Counter[tuple[str, str]],
    now: float,
    duration: float,
    stall_bundle: str | None,
) -> CheckResult:
    """Write the run's textfile and log line (where asked); a file not written is a problem of
    the run, in its verdict."""
    diagnosis, decision, notes = result.diagnosis, result.decision, list(result.notes)
    assert decision is not None
    if check.prom_file is not None:
        from slime_hangdoctor.watchdog.prom import write_prom_file

        problem = write_prom_file(
            check.prom_file,
            diagnosis.verdict,
            decision,
            outcomes,
            now=now,
            duration_s=duration,
            bundle=stall_bundle,
        )
        if problem is not None:
            notes.append(problem)
            diagnosis = with_problem(diagnosis, problem, "watchdog.prom_file")
    if check.log_file is not None:
        problem = _log_run(
            check.log_file, diagnosis, decision, result.bundle, result.hook_rc, now, duration, notes
        )
        if problem is not None:
            notes.append(problem)
            diagnosis = with_problem(diagnosis, problem, "watchdog.log_file")
    return dataclasses.replace(result, diagnosis=diagnosis, notes=tuple(notes))


def _stall_bundle(decision: CheckDecision, bundle: Path | None, before: str | None) -> str | None:
    """The bundle of the stall in progress: this run's, else the one an earlier run of the same
    stall wrote (kept while the stall lasts, forgotten when the job progresses or idles)."""
    if bundle is not None:
        return str(bundle)
    if decision.exit_code in (ExitCode.WARNING, ExitCode.CRITICAL, ExitCode.UNKNOWN):
        return before
    return None


def _counter_look(
    previous: WatchState, target: str, opts: CollectOptions, now: float
) -> CounterJudgement | None:
    """The counters-only look, where the last analysed look left a plan that may be read now
    (analysis/counters.py says when); None where there is none to read."""
    plan: CounterPlan | None = previous.counter_plan
    if plan is None:
        return None
    from slime_hangdoctor.analysis.counters import judge_counters, usable_plan
    from slime_hangdoctor.watchdog.counter_look import read_counters

    if usable_plan(plan, target, now) is not None:
        return None
    reading = read_counters(
        plan,
        api_key=opts.api_key,
        window_s=opts.window_s,
        timeout_s=min(opts.probe_timeout_s, opts.timeout_s / 4),
    )
    return judge_counters(plan, reading, now)


def _keep_evidence(
    address: str | None, opts: CollectOptions, check: CheckOptions, now: float
) -> tuple[Path | None, str | None]:
    """On a new stall: collect again into --bundle-dir (opt-in native stacks / flight recorder).

    Returns (bundle, None), or (None, why the stall bundle could not be written)."""
    if check.bundle_dir is None:
        return None, None
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now))
    # A random tail: nobody can plant the next stall bundle's name (or its .tar.gz) ahead of it.
    root = check.bundle_dir / f"stall-{stamp}-{secrets.token_hex(6)}"
    stall_opts = dataclasses.replace(
        opts,
        native=opts.native or check.on_stall_native,
        flight_recorder=opts.flight_recorder or check.on_stall_flight_recorder,
    )
    from slime_hangdoctor.pipeline import attach

    # --keep holds on disk at every moment: room is made before the new bundle is written, and a
    # bundle a full disk cut short stays (the newest evidence) in place of an older one.
    try:
        # Ours and private (created 0700), reached through no directory another user steers.
        os.close(open_private_dir(check.bundle_dir))
        _retain(check.bundle_dir, check.keep_bundles - 1)
        attach(address, stall_opts, out=root, command="check-stall")
    except (OSError, HangDoctorError) as exc:
        return (
            None,
            f"stall bundle not written: cannot write to --bundle-dir {check.bundle_dir} ({exc})",
        )
    except Exception as exc:  # noqa: BLE001 - evidence is best-effort; the alert must still go out
        return None, f"stall bundle not written to {check.bundle_dir}: {type(exc).__name__}: {exc}"
    finally:
        _retain(check.bundle_dir, check.keep_bundles)
    return root, None


def _retain(bundle_dir: Path, keep: int) -> None:
    """Remove the oldest stall bundles beyond `keep` (at least one: the newest is never removed)."""
    try:
        entries = list(bundle_dir.iterdir())
    except OSError:
        return  # the directory is not there or not readable: nothing to prune
    stalls = sorted(p for p in entries if p.is_dir() and p.name.startswith("stall-"))
    for old in stalls[: max(0, len(stalls) - max(1, keep))]:
        shutil.rmtree(old, ignore_errors=True)
        tar = old.with_name(old.name + ".tar.gz")
        tar.unlink(missing_ok=True)


def _run_hook(
    cmd: str | None, diagnosis: Diagnosis, decision: CheckDecision, bundle: Path | None
) -> int | None:
    """Run --on-stall-exec through /bin/sh with the verdict JSON on stdin; bounded by HOOK_TIMEOUT_S."""
    if not cmd:
        return None
    payload = diagnosis.verdict.to_json()
    payload["bundle"] = str(bundle) if bundle else None
    env = {**os.environ, "HANGDOCTOR_EXIT_CODE": str(int(decision.exit_code))}
    if bundle is not None:
        env["HANGDOCTOR_BUNDLE"] = str(bundle)
    try:
        proc = subprocess.run(
            ["/bin/sh", "-c", cmd],
            input=json.dumps(payload).encode(),
            timeout=HOOK_TIMEOUT_S,
            env=env,
            capture_output=True,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return -int(signal.SIGKILL)
    except OSError:
        return 127
    return proc.returncode


def _log_run(
    path: Path,
    diagnosis: Diagnosis,
    decision: CheckDecision,
    bundle: Path | None,
    hook_rc: int | None,
    now: float,
    duration: float,
    notes: list[str],
) -> str | None:
    """Append the run's JSON line to `path`; returns why not, or None.

    Opened O_APPEND | O_NOFOLLOW (mode 0600 when created, whatever the umask) under its
    directory's descriptor (made 0700 if missing, reached as in safe_fs.open_dir), without
    blocking; anything but a plain file of one link is refused: a root cron run never writes
    through a planted symlink, into a FIFO or into a hard link of another file."""
    v = diagnosis.verdict
    line: dict[str, Any] = {
        "time": now,
        "exit_code": int(decision.exit_code),
        "status": v.status.value,
        "stage": v.stage.value,
        "summary": v.summary,
        "stalled_for_s": round(decision.stalled_for_s, 1),
        "new_stall": decision.new_stall,
        "culprits": [
            c["role"] + (f" pid {c['pid']}" if c.get("pid") else "")
            for c in v.to_json()["culprits"]
        ],
        "bundle": str(bundle) if bundle else None,
        "hook_rc": hook_rc,
        "duration_s": round(duration, 3),
        "notes": notes,
    }
    path = Path(os.path.abspath(path))
    try:
        parent, _ = open_dir(path.parent, create=True, leaf_mode=0o700)
    except (UnsafePath, OSError) as exc:
        return f"--log-file {path} not written: {_why(exc)}"
    try:
        fd = os.open(
            path.name,
            os.O_WRONLY | os.O_APPEND | os.O_CREAT | NOFOLLOW | NONBLOCK | CLOEXEC,
            0o600,
            dir_fd=parent,
        )
    except OSError as exc:
        return f"--log-file {path} not written: {_why(exc)}"
    finally:
        os.close(parent)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return f"--log-file {path} not written: it is not a regular file"
        if st.st_nlink != 1:
            return f"--log-file {path} not written: it has other hard links"
        data = memoryview((json.dumps(line) + "\n").encode("utf-8"))
        try:  # unbuffered: a full disk (ENOSPC) answers here, not from a buffered close
            while data:
                data = data[os.write(fd, data) :]
        except OSError as exc:
            return f"--log-file {path} not written: {_why(exc)}"
    finally:
        os.close(fd)
    return None


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError) and not isinstance(exc, UnsafePath) and exc.strerror:
        return "it is a symbolic link" if exc.errno == errno.ELOOP else exc.strerror
    return str(exc)


def failed_run(exc: Exception) -> CheckResult:
    """What `watch` reports for a run that raised (a bug of ours, or the machine under it): UNKNOWN
    with the error, and the watch goes on to its next run with the state it had."""
    why = f"internal error in this run: {type(exc).__name__}: {exc}"
    verdict = unknown_verdict(
        f"Could not tell: {why}. This is a bug in slime-hangdoctor; the watch goes on.",
        next_steps=("Report it with this line; SLIME_HANGDOCTOR_DEBUG=1 prints the traceback",),
    )
    return CheckResult(Diagnosis(verdict), ExitCode.UNKNOWN, notes=(why,))


def watch_loop(
    address: str | None,
    opts: CollectOptions,
    check: CheckOptions,
    *,
    interval_s: float,
    max_runs: int | None = None,
    on_result: Any = None,
) -> ExitCode:
    """`watch`: run_check every interval until SIGTERM/SIGINT (or max_runs); returns the last exit code."""
    import gc

    from slime_hangdoctor.watchdog.heap import cap_arenas, release_free_memory

    gc.enable()  # the console script starts with the collector off (__main__.py); this loop lives on
    cap_arenas()
    stop = {"flag": False}

    def _stop(_sig: int, _frame: object) -> None:
        stop["flag"] = True

    old_term = signal.signal(signal.SIGTERM, _stop)
    last = ExitCode.UNKNOWN
    runs = 0
    carried: WatchState | None = None
    try:
        while not stop["flag"]:
            t0 = time.monotonic()
            try:
                result = run_check(address, opts, check, carried)
                carried = result.unsaved_state
            except Exception as exc:  # noqa: BLE001 - a watchdog outlives one failed run
                if os.environ.get("SLIME_HANGDOCTOR_DEBUG"):
                    traceback.print_exc()
                result = failed_run(exc)
            last = result.exit_code
            release_free_memory()  # a loop that lives for weeks keeps no run's freed heap
            runs += 1
            if on_result is not None:
                on_result(result)
            if max_runs is not None and runs >= max_runs:
                break
            while not stop["flag"] and time.monotonic() - t0 < interval_s:
                time.sleep(min(0.5, interval_s))
    finally:
        signal.signal(signal.SIGTERM, old_term)
    return last
