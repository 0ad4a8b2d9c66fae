"""`check` (one cron tick) and `watch` (a loop for systemd): detect a stall, keep evidence, alert."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slime_hangdoctor.collect.options import CollectOptions
from slime_hangdoctor.errors import HangDoctorError
from slime_hangdoctor.markers import progress_markers
from slime_hangdoctor.pipeline import Analysed, attach
from slime_hangdoctor.verdict import Diagnosis, ExitCode, Finding, Severity, unknown_verdict
from slime_hangdoctor.watchdog.decide import CheckDecision, decide_check
from slime_hangdoctor.watchdog.prom import write_prom_file
from slime_hangdoctor.watchdog.state import LockHeld, load_state, run_lock, save_state

HOOK_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class CheckOptions:
    state_file: Path
    stall_after_s: float = 600.0
    bundle_dir: Path | None = None
    keep_bundles: int = 5
    on_stall_native: bool = False
    on_stall_flight_recorder: bool = False
    on_stall_exec: str | None = None
    prom_file: Path | None = None
    log_file: Path | None = None


@dataclass(frozen=True)
class CheckResult:
    diagnosis: Diagnosis
    exit_code: ExitCode
    decision: CheckDecision | None = None
    bundle: Path | None = None
    hook_rc: int | None = None
    notes: tuple[str, ...] = ()


def run_check(address: str | None, opts: CollectOptions, check: CheckOptions) -> CheckResult:
    """One watchdog run under the state-file lock. Never raises for a bad state file or a dead job."""
    try:
        with run_lock(check.state_file):
            return _check_locked(address, opts, check)
    except LockHeld as exc:
        verdict = unknown_verdict(
            f"Skipped: another check is still running (lock {exc} held); runs never pile up.",
        )
        return CheckResult(Diagnosis(verdict), ExitCode.UNKNOWN, notes=("lock held",))


def _check_locked(address: str | None, opts: CollectOptions, check: CheckOptions) -> CheckResult:
    started = time.monotonic()
    now = time.time()
    loaded = load_state(check.state_file)
    notes = [loaded.problem] if loaded.problem else []
    analysed = _look(address, opts)
    diagnosis = analysed.diagnosis
    markers = (
        progress_markers(analysed.snapshot, analysed.topology)
        if analysed.snapshot is not None and analysed.topology is not None
        else {}
    )
    decision = decide_check(
        diagnosis.verdict, markers, loaded.state, now=now, stall_after_s=check.stall_after_s
    )
    diagnosis = _annotate(diagnosis, decision, notes)
    bundle: Path | None = None
    hook_rc: int | None = None
    if decision.new_stall:
        bundle, problem = _keep_evidence(address, opts, check, now)
        if problem is not None:
            notes.append(problem)
            diagnosis = _annotate_problem(diagnosis, problem)
        hook_rc = _run_hook(check.on_stall_exec, diagnosis, decision, bundle)
    save_state(check.state_file, decision.state)
    duration = time.monotonic() - started
    if check.prom_file is not None:
        write_prom_file(
            check.prom_file,
            diagnosis.verdict,
            decision,
            analysed.manifest,
            now=now,
            duration_s=duration,
        )
    if check.log_file is not None:
        _log_run(check.log_file, diagnosis, decision, bundle, hook_rc, now, duration, notes)
    return CheckResult(diagnosis, decision.exit_code, decision, bundle, hook_rc, tuple(notes))


def _look(address: str | None, opts: CollectOptions) -> Analysed:
    """One look in the watchdog's mode: the second sample's stacks (half of a run's py-spy cost)
    only when nothing that moves with work moved over the window."""
    return attach(address, dataclasses.replace(opts, stacks_only_if_stalled=True), command="check")


def _annotate(diagnosis: Diagnosis, decision: CheckDecision, notes: list[str]) -> Diagnosis:
    findings = list(diagnosis.verdict.findings)
    findings.append(Finding("watchdog.stall_clock", Severity.INFO, decision.reason or "no stall"))
    for note in notes:
        findings.append(Finding("watchdog.state_file", Severity.WARNING, note))
    verdict = dataclasses.replace(
        diagnosis.verdict,
        findings=tuple(findings),
        suspected=decision.exit_code == ExitCode.WARNING,
        extra={**diagnosis.verdict.extra, "stalled_for_s": round(decision.stalled_for_s, 1)},
    )
    return dataclasses.replace(diagnosis, verdict=verdict)


def _annotate_problem(diagnosis: Diagnosis, problem: str) -> Diagnosis:
    verdict = diagnosis.verdict
    finding = Finding("watchdog.stall_bundle", Severity.WARNING, problem)
    verdict = dataclasses.replace(
        verdict,
        findings=(*verdict.findings, finding),
        blind_spots=(*verdict.blind_spots, problem),
    )
    return dataclasses.replace(diagnosis, verdict=verdict)


def _keep_evidence(
    address: str | None, opts: CollectOptions, check: CheckOptions, now: float
) -> tuple[Path | None, str | None]:
    """On a new stall: collect again into --bundle-dir (opt-in native stacks / flight recorder).

    Returns (bundle, None), or (None, why the stall bundle could not be written)."""
    if check.bundle_dir is None:
        return None, None
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now))
    root = check.bundle_dir / f"stall-{stamp}"
    stall_opts = dataclasses.replace(
        opts,
        native=opts.native or check.on_stall_native,
        flight_recorder=opts.flight_recorder or check.on_stall_flight_recorder,
    )
    try:
        check.bundle_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        attach(address, stall_opts, out=root, command="check-stall")
    except (OSError, HangDoctorError) as exc:
        return (
            None,
            f"stall bundle not written: cannot write to --bundle-dir {check.bundle_dir} ({exc})",
        )
    except Exception as exc:  # noqa: BLE001 - evidence is best-effort; the alert must still go out
        return None, f"stall bundle not written to {check.bundle_dir}: {type(exc).__name__}: {exc}"
    _retain(check.bundle_dir, check.keep_bundles)
    return root, None


def _retain(bundle_dir: Path, keep: int) -> None:
    stalls = sorted(p for p in bundle_dir.iterdir() if p.is_dir() and p.name.startswith("stall-"))
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
) -> None:
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
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(line) + "\n")


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
    stop = {"flag": False}

    def _stop(_sig: int, _frame: object) -> None:
        stop["flag"] = True

    old_term = signal.signal(signal.SIGTERM, _stop)
    last = ExitCode.UNKNOWN
    runs = 0
    try:
        while not stop["flag"]:
            t0 = time.monotonic()
            result = run_check(address, opts, check)
            last = result.exit_code
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
