"""Prometheus textfile for node-exporter's textfile collector (written atomically, safely).

The file goes where the user says (`--prom-file`), typically node-exporter's textfile directory,
and a root `check` writes it: so it is written as the watchdog's other outputs are
(safe_fs.open_dir: every directory above it reliable, a symbolic link followed only if root or
the caller owns it, missing directories made with an exact mode whatever the umask), into a new
file of a random name (O_CREAT | O_EXCL | O_NOFOLLOW, under the directory's descriptor) renamed
over the old one. prometheus_client's `write_to_textfile` opened `<path>.<pid>.<thread id>` with
a plain `open(..., "wb")`, which follows a symbolic link another user plants there, and made
missing directories with the umask (0777 under umask 0).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from slime_hangdoctor.safe_fs import UnsafePath, replace_file
from slime_hangdoctor.verdict import Status, Verdict
from slime_hangdoctor.watchdog.decide import CheckDecision


def write_prom_file(
    path: Path,
    verdict: Verdict,
    decision: CheckDecision,
    probe_outcomes: Mapping[tuple[str, str], int],
    *,
    now: float,
    duration_s: float,
    bundle: str | None = None,
) -> str | None:
    """`probe_outcomes`: (source, outcome) -> how many of the run's probes ended so; `bundle`:
    the stall bundle of the stall in progress (written by this run or an earlier one of the same
    stall). Returns why the file was not written, or None (the run goes on either way)."""
    from prometheus_client import CollectorRegistry, Gauge, generate_latest

    reg = CollectorRegistry()
    _page_metrics(reg, verdict, bundle)
    Gauge(
        "slime_hangdoctor_seconds_since_progress",
        "Seconds since the slime job last made progress (0 while progressing).",
        registry=reg,
    ).set(decision.stalled_for_s)
    stalled = Gauge(
        "slime_hangdoctor_stalled",
        "1 when the job is stalled past --stall-after, with the blocked stage.",
        ["stage"],
        registry=reg,
    )
    stalled.labels(stage=verdict.stage.value).set(1 if decision.exit_code == 2 else 0)
    status = Gauge(
        "slime_hangdoctor_status", "The verdict's status (one-hot).", ["status"], registry=reg
    )
    for s in Status:
        status.labels(status=s.value).set(1 if verdict.status is s else 0)
    Gauge(
        "slime_hangdoctor_exit_code", "The check's exit code (0 OK .. 3 UNKNOWN).", registry=reg
    ).set(int(decision.exit_code))
    culprit = Gauge(
        "slime_hangdoctor_culprit_info",
        "The process the others wait for (1 per culprit).",
        ["role", "node_ip", "pid", "rank", "engine_url"],
        registry=reg,
    )
    for c in verdict.culprits:
        culprit.labels(
            role=c.role.value,
            node_ip=c.node_ip or "",
            pid=pid_label(c.pid),
            rank="" if c.rank is None else str(c.rank),
            engine_url=c.engine_url or "",
        ).set(1)
    outcomes = Gauge(
        "slime_hangdoctor_probe_outcomes",
        "Probes of the last run by source and outcome.",
        ["source", "outcome"],
        registry=reg,
    )
    for (source, outcome), n in probe_outcomes.items():
        outcomes.labels(source=source, outcome=outcome).set(n)
    Gauge(
        "slime_hangdoctor_last_run_timestamp_seconds", "When the last check ran.", registry=reg
    ).set(now)
    Gauge(
        "slime_hangdoctor_run_duration_seconds", "How long the last check took.", registry=reg
    ).set(duration_s)
    return write_textfile(path, generate_latest(reg))


def pid_label(pid: int | None) -> str:
    """The `pid` label of a culprit: its pid, or "" (no label, to Prometheus) where it has no
    process: Ray lists an actor not yet placed on a node with pid 0 and no pid is 0 to the user.
    An unknown rank, node or URL is written the same way (""), a rank 0 as "0" (a real rank)."""
    return str(pid) if pid is not None and pid > 0 else ""


def job_seen(verdict: Verdict) -> bool:
    """Did this run see a slime job at all (hung or progressing)? IDLE (nothing found) and
    UNKNOWN (nothing could be read) did not."""
    return verdict.status in (Status.HUNG, Status.PROGRESSING)


def submission_id(verdict: Verdict) -> str:
    """The Ray job's submission id (else its job id) the analysis found running; "" if none."""
    job = verdict.extra.get("job")
    if not isinstance(job, Mapping):
        return ""
    for key in ("submission_id", "job_id"):
        value = job.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


def _page_metrics(reg: Any, verdict: Verdict, bundle: str | None) -> None:
    """What an alert needs beside the state: the doctor's version, whether a job is seen, and
    `slime_hangdoctor_page_info`, one series per run (so an alert's join never drops it): the
    first culprit's role, node and pid, the job's submission id and the stall bundle, "" where
    there is none (monitoring/prometheus-rules.yml joins them into the page with group_left)."""
    from prometheus_client import Gauge

    from slime_hangdoctor import __version__

    Gauge(
        "slime_hangdoctor_build_info", "The doctor's version (1).", ["version"], registry=reg
    ).labels(version=__version__).set(1)
    Gauge(
        "slime_hangdoctor_job_seen",
        "1 when the run saw a slime job (hung or progressing), 0 when it found none or was blind.",
        registry=reg,
    ).set(1 if job_seen(verdict) else 0)
    first = verdict.culprits[0] if verdict.culprits else None
    Gauge(
        "slime_hangdoctor_page_info",
        "What a page carries: the first culprit, the job's submission id, the stall bundle (1).",
        ["role", "node_ip", "pid", "submission_id", "bundle"],
        registry=reg,
    ).labels(
        role=first.role.value if first else "",
        node_ip=(first.node_ip or "") if first else "",
        pid=pid_label(first.pid) if first else "",
        submission_id=submission_id(verdict),
        bundle=bundle or "",
    ).set(1)


# node-exporter runs as a user of its own: the file and the directories the doctor makes for it
# are readable by all, writable by the doctor's user only
FILE_MODE = 0o644
DIR_MODE = 0o755


def write_textfile(path: Path, data: bytes) -> str | None:
    """Replace `path` with `data`; returns why not, or None. As safe_fs.replace_file writes (its
    directory reached as in open_dir, made DIR_MODE with its missing parents if missing, refused
    when others may write to it without a sticky bit: they could replace the metrics; a new file
    of a random name there, FILE_MODE, renamed over `path`, never written through a link)."""
    shown = f"--prom-file {os.path.abspath(path)} not written"
    try:
        replace_file(
            path, lambda fh: fh.write(data), mode=FILE_MODE, dir_mode=DIR_MODE, only_own=False
        )
    except UnsafePath as exc:
        return f"{shown}: {exc}"
    except OSError as exc:
        return f"{shown}: {exc.strerror or exc}"
    return None
