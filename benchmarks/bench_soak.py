"""Soak (issue 32, point 9; issue 43, item 2): `watch --interval 1` for two hours or more against the
demo job while a fault is armed and cleared in turns, the Ray head is restarted, the job is
restarted, and the disk under the watch's state and bundles is full for ten minutes. What a
watchdog that runs for weeks under systemd must show: its memory, open files, threads and child
processes flat after warm-up, one alert per stall, its `--keep` limit holding on disk, and a clear
warning while the disk is full.

    nice -n 10 python -m benchmarks.bench_soak [--duration-s 7500] [--out FILE] [--nodes 2]
    python -m benchmarks.plot_soak FILE PNG

The job is the demo's `rollout_engine_stuck` (engine 1's scheduler blocks inside `forward_decode`
while its fault is armed; the job arms it itself, once, at its third rollout). The fault's arm
file (the stand-in's `--fault-arm-file`, which the engine actor logs) is then removed and created
again in turns, `PHASE_S` each: removed, the scheduler's forward returns and the job trains again;
created, the next decode blocks again (demo/slime_hangdoctor_demo/sglang/srt/model_executor/
model_runner.py `_block_forever`): a stall every 2 * PHASE_S. With `--nodes 2` (the default) the
engines run on a second raylet (127.0.0.2, resource `rollout_node`), so that every run of the watch
reaches them through its Ray driver process, as on a real cluster.

Disruptions, each at the first phase boundary after its share of the duration:
- 0.30, the head restart: the job, the head and its second node are stopped; 30 s later a new head
  is started on the same GCS and dashboard ports, a new second node and a new job (which arms its
  fault itself): `watch` keeps its one address all along.
- 0.55, the job restart: the job alone is stopped and a new one submitted to the same head (new
  actors, new pids, new engine and router ports).
- 0.75, the full disk: the watch's state, bundles, textfile and run log live on a tmpfs of their
  own (`DISK_MIB`, mounted by the soak: root); a filler file takes every free byte (written until
  the kernel answers ENOSPC) at the start of an armed phase and is removed DISK_FULL_S later.
Without root (no mount) the disk part is skipped and the result says so.

`watch` runs with `--stall-after STALL_AFTER_S --bundle-dir --keep KEEP --on-stall-exec` (one line
per alert into a file on the ordinary disk) `--prom-file --log-file`. Every SAMPLE_S seconds (a
thread of its own) psutil reads the watch process: RSS, open fds, threads, live child processes
(py-spy runs, the on-stall hook, the Ray driver process), CPU; and the bundle directory (entries,
bytes), the tmpfs's free bytes, the watch's warning lines so far and the load average. The result
(JSON, also written to `--out`) has the series and a summary over the samples after WARMUP_S: each
figure's min, max and the RSS slope (least squares, KiB per hour; also over the last half); each
armed phase with the alerts that came in it, and the alerts outside them; the most stall bundles
seen on disk against `--keep`; the warnings while the disk was full.

A benchmark, not a test: it takes its duration and a demo job's CPU. Everything it starts (the
demo's heads, jobs, the watch process, the tmpfs) is stopped when it ends, also on failure or
SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.machine import cli_env, env_with, hangdoctor_argv

FAULT = "rollout_engine_stuck"
FAULT_AFTER_STEPS = 3
DURATION_S = 7500.0  # 125 minutes: two hours after the warm-up
PHASE_S = 300.0  # armed 5 min, cleared 5 min, in turns
# no progress for this long is a stall: above the quiet spells of a healthy demo job on a loaded
# 2-core box (a restarted job's start-up showed none for ~70 s at load 28 in a trial run)
STALL_AFTER_S = 120
KEEP = 3
SAMPLE_S = 10.0
WARMUP_S = 600.0
READY_TIMEOUT_S = 300.0
START_TIMEOUT_S = 240.0  # `ray start` on the shared box (90 s was missed once at load 15)
START_ATTEMPTS = 3
NODES = 2
NODE2_IP = "127.0.0.2"
# the engines on the second node, the train ranks on the head (benchmarks/bench_nodes.py's layout)
ENGINES_ON_NODE2 = [
    "--actor-node-resource",
    "node:__internal_head__",
    "--rollout-node-resource",
    "rollout_node",
]
HEAD_RESTART_AT, JOB_RESTART_AT, DISK_FULL_AT = 0.30, 0.55, 0.75
DISK_FULL_S = 600.0
DISK_MIB = 64


@dataclass
class Soak:
    work: Path
    watch: subprocess.Popen[bytes] | None = None
    runs: list[Any] = field(default_factory=list)  # demo runs (launch.DemoRun), oldest first
    heads: list[Any] = field(default_factory=list)  # our heads (each stops its second node)
    disk: Path | None = None  # the tmpfs under the watch's files (None: not mounted)
    filler: Path | None = None
    arm_file: Path | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)
    t0: float = field(default_factory=time.monotonic)
    epoch0: float = field(default_factory=time.time)

    def now(self) -> float:
        return round(time.monotonic() - self.t0, 1)

    def epoch_to_t(self, epoch: float) -> float:
        return round(epoch - self.epoch0, 1)

    def event(self, what: str, **extra: Any) -> None:
        self.events.append({"t": self.now(), "event": what, **extra})
        print(f"[{self.now():7.1f}s] {what} {extra if extra else ''}", flush=True)


_ARM_FILE_RE = re.compile(r"demo fault plan for engine \d+: server fault \w+ \(arm file (\S+)\)")


def _arm_file_of(run: Any) -> Path:
    """The arm file of the job's faulty engine, as its SGLangEngine actor logs it (the job's log,
    through the Job API)."""
    from slime_hangdoctor_demo import cluster

    found = _ARM_FILE_RE.search(cluster.job_logs(run.head, run.submission_id))
    if found is None:
        raise RuntimeError(f"job {run.submission_id} logged no fault arm file")
    return Path(found.group(1))


def _start_head(soak: Soak, same_address_as: Any = None) -> Any:
    """A head of ours (two CPUs) and, with NODES 2, its second node for the engines."""
    from slime_hangdoctor_demo import cluster

    for attempt in range(1, START_ATTEMPTS + 1):
        workdir = soak.work / f"head{len(soak.heads)}-{attempt}"
        head = None
        try:
            head = cluster.start_head(
                workdir, num_cpus=2, same_address_as=same_address_as, timeout=START_TIMEOUT_S
            )
            if NODES > 1:
                cluster.start_worker_node(
                    head,
                    workdir,
                    resources={"rollout_node": 4},
                    num_cpus=4,
                    node_ip_address=NODE2_IP,
                    timeout=START_TIMEOUT_S,
                )
        except cluster.ClusterError as exc:  # a loaded box: `ray start` late; try again
            soak.event("head start failed", attempt=attempt, why=str(exc)[:300])
            if head is not None:
                head.stop(timeout=5.0)
            if attempt == START_ATTEMPTS:
                raise
            _wait(soak, soak.now() + 15.0)
            continue
        soak.heads.append(head)
        soak.event("head started", dashboard=head.dashboard_url, nodes=NODES)
        return head
    raise AssertionError("unreachable")


def _start_job(soak: Soak, head: Any) -> Any:
    from slime_hangdoctor_demo.launch import start_demo

    extra = ENGINES_ON_NODE2 if NODES > 1 else []
    for attempt in range(1, START_ATTEMPTS + 1):
        workdir = soak.work / f"job{len(soak.runs)}-{attempt}"
        run = start_demo(
            FAULT, workdir=workdir, fault_after_steps=FAULT_AFTER_STEPS, head=head, extra_args=extra
        )
        try:
            run.wait_until_ready(timeout=READY_TIMEOUT_S)  # the job has armed its fault
            soak.arm_file = _arm_file_of(run)
        except Exception as exc:  # noqa: BLE001 - a job that did not start: stop it, try again
            soak.event("job start failed", attempt=attempt, why=str(exc)[:300])
            run.stop()
            if attempt == START_ATTEMPTS:
                raise
            continue
        soak.runs.append(run)
        soak.event("job ready, fault armed by the job", submission_id=run.submission_id)
        return run
    raise AssertionError("unreachable")


def _mount_disk(soak: Soak) -> Path:
    """The watch's own small disk (a tmpfs), or the work dir where it cannot be mounted."""
    mnt = soak.work / "disk"
    mnt.mkdir(mode=0o700)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_MIB}m,mode=0700", "tmpfs", str(mnt)],
        capture_output=True,
        check=False,
    )
    if done.returncode == 0:
        soak.disk = mnt
        soak.event("tmpfs mounted", mib=DISK_MIB)
    else:
        soak.event("no tmpfs (the full disk is skipped)", why=done.stderr.decode().strip())
    return mnt


def _fill_disk(soak: Soak) -> None:
    assert soak.disk is not None
    soak.filler = soak.disk / "filler"
    written = 0
    with soak.filler.open("wb") as fh:
        try:
            while True:
                fh.write(b"\0" * 65536)
                fh.flush()
                written += 65536
        except OSError as exc:
            soak.event("disk full", filler_bytes=written, errno=exc.errno)


def _free_disk(soak: Soak) -> None:
    if soak.filler is not None:
        soak.filler.unlink(missing_ok=True)
        soak.filler = None
        soak.event("disk freed")


def _set_armed(soak: Soak, armed: bool) -> None:
    assert soak.arm_file is not None
    if armed:
        soak.arm_file.write_text("armed\n")
    else:
        soak.arm_file.unlink(missing_ok=True)
    soak.event("armed" if armed else "cleared")


def _start_watch(soak: Soak, dashboard_url: str) -> subprocess.Popen[bytes]:
    d = soak.work / "watch"  # the hook's alerts and the watch's output: on the ordinary disk
    d.mkdir(mode=0o700)
    w = _mount_disk(soak)  # state, bundles, textfile and run log: on the watch's own disk
    argv = [
        *hangdoctor_argv(),
        "watch",
        dashboard_url,
        "--interval",
        "1",
        "--stall-after",
        str(STALL_AFTER_S),
        "--state-file",
        str(w / "state" / "state.json"),
        "--bundle-dir",
        str(w / "bundles"),
        "--keep",
        str(KEEP),
        "--on-stall-exec",
        f"date +%s >> {d / 'alerts.txt'}",
        "--prom-file",
        str(w / "prom" / "hangdoctor.prom"),
        "--log-file",
        str(w / "log" / "runs.jsonl"),
    ]
    out = (d / "stdout.txt").open("wb")
    err = (d / "stderr.txt").open("wb")
    proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env_with(cli_env()))
    soak.event("watch started", pid=proc.pid)
    return proc


def _sample(soak: Soak) -> None:
    import psutil

    assert soak.watch is not None
    d = soak.work / "watch"
    try:
        p = psutil.Process(soak.watch.pid)
        with p.oneshot():
            row: dict[str, Any] = {
                "t": soak.now(),
                "rss_kib": p.memory_info().rss // 1024,
                "fds": p.num_fds(),
                "threads": p.num_threads(),
                "cpu_s": round(sum(p.cpu_times()[:4]), 2),
            }
        row["children"] = len(p.children(recursive=True))
    except psutil.Error as exc:
        row = {"t": soak.now(), "error": str(exc)}
    bundles = soak.work / "disk" / "bundles"
    entries = list(bundles.iterdir()) if bundles.is_dir() else []
    row["stall_bundles"] = sum(1 for e in entries if e.name.startswith("stall-") and e.is_dir())
    row["bundle_dir_entries"] = len(entries)
    row["bundle_dir_bytes"] = sum(f.stat().st_size for f in bundles.rglob("*") if f.is_file())
    row["loadavg"] = [round(x, 2) for x in os.getloadavg()]
    lines = (d / "stdout.txt").read_bytes().count(b"\n")
    row["status_lines"] = lines
    err = (d / "stderr.txt").read_bytes()
    row["warnings"] = err.count(b"warning:")
    row["no_space_warnings"] = err.count(b"No space left on device")
    row["tracebacks"] = err.count(b"Traceback") + err.count(b"internal error")
    if soak.disk is not None:
        st = os.statvfs(soak.disk)
        row["disk_free_kib"] = st.f_bavail * st.f_frsize // 1024
    row["disk_full"] = soak.filler is not None
    soak.samples.append(row)


def _sampler(soak: Soak, stop: threading.Event) -> None:
    """Every SAMPLE_S seconds, whatever the main thread does (a job start takes minutes)."""
    while not stop.wait(SAMPLE_S):
        if soak.watch is not None and soak.watch.poll() is None:
            _sample(soak)


def _wait(soak: Soak, until: float) -> None:
    while soak.now() < until:
        if soak.watch is not None and soak.watch.poll() is not None:
            raise RuntimeError(f"watch exited early ({soak.watch.returncode})")
        time.sleep(max(0.0, min(1.0, until - soak.now())))


def _slope_kib_per_hour(rows: list[dict[str, Any]]) -> float | None:
    pts = [(float(r["t"]), float(r["rss_kib"])) for r in rows if "rss_kib" in r]
    if len(pts) < 3:
        return None
    n = len(pts)
    mx = sum(t for t, _ in pts) / n
    my = sum(v for _, v in pts) / n
    var = sum((t - mx) ** 2 for t, _ in pts)
    if not var:
        return None
    return round(sum((t - mx) * (v - my) for t, v in pts) / var * 3600.0, 1)


def _range(rows: list[dict[str, Any]], key: str) -> list[Any]:
    values = [r[key] for r in rows if key in r]
    return [min(values), max(values)] if values else []


def _disk_full_summary(soak: Soak) -> dict[str, Any]:
    full = [r for r in soak.samples if r.get("disk_full")]
    if not full:
        return {"done": False}
    first, last = full[0], full[-1]
    return {
        "done": True,
        "samples": len(full),
        "free_kib_range": _range(full, "disk_free_kib"),
        "no_space_warnings": last.get("no_space_warnings", 0) - first.get("no_space_warnings", 0),
        "status_lines": last.get("status_lines", 0) - first.get("status_lines", 0),
    }


def summary(soak: Soak, duration_s: float) -> dict[str, Any]:
    after = [r for r in soak.samples if r["t"] >= WARMUP_S]
    half = [r for r in after if r["t"] >= (WARMUP_S + soak.now()) / 2]
    d = soak.work / "watch"
    alerts_file = d / "alerts.txt"
    alerts = alerts_file.read_text().split() if alerts_file.exists() else []
    # a stall is an armed phase (the job arms its fault itself once ready) that lasted past
    # --stall-after; each alert is put in the phase it came in (the hook's clock: epoch seconds)
    phases: list[dict[str, Any]] = []
    armed_at: float | None = None
    for e in soak.events:
        if e["event"] in ("armed", "job ready, fault armed by the job"):
            armed_at = e["t"] if armed_at is None else armed_at
        elif (
            e["event"] in ("cleared", "head stopped", "job stopped", "end") and armed_at is not None
        ):
            phases.append(
                {"from": armed_at, "to": e["t"], "stall": e["t"] - armed_at > STALL_AFTER_S + 15}
            )
            armed_at = None
    to_t = [soak.epoch_to_t(float(a)) for a in alerts]
    for ph in phases:
        ph["alerts"] = sum(1 for t in to_t if ph["from"] <= t <= ph["to"] + 5)
    outside = [t for t in to_t if not any(ph["from"] <= t <= ph["to"] + 5 for ph in phases)]
    stalls = sum(1 for ph in phases if ph["stall"])
    cpu = [r for r in after if "cpu_s" in r]
    return {
        "duration_s": soak.now(),
        "planned_s": duration_s,
        "warmup_s": WARMUP_S,
        "samples_after_warmup": len(after),
        "rss_kib_range": _range(after, "rss_kib"),
        "rss_slope_kib_per_hour": _slope_kib_per_hour(after),
        "rss_slope_kib_per_hour_last_half": _slope_kib_per_hour(half),
        "rss_kib_first_and_last_after_warmup": [after[0].get("rss_kib"), after[-1].get("rss_kib")]
        if after
        else [],
        "fds_range": _range(after, "fds"),
        "threads_range": _range(after, "threads"),
        "children_range": _range(after, "children"),
        "watch_cpu_s_after_warmup": round(cpu[-1]["cpu_s"] - cpu[0]["cpu_s"], 1) if cpu else None,
        "status_lines": soak.samples[-1].get("status_lines") if soak.samples else None,
        "stalls": stalls,
        "alerts": len(alerts),
        "alerts_t": to_t,
        "armed_phases": phases,
        "alerts_outside_armed_phases_t": outside,
        "keep": KEEP,
        "most_stall_bundles_on_disk": max((r["stall_bundles"] for r in soak.samples), default=0),
        "bundle_dir_bytes_range": _range(after, "bundle_dir_bytes"),
        "disk_full": _disk_full_summary(soak),
        "tracebacks": soak.samples[-1].get("tracebacks") if soak.samples else None,
        "nodes": NODES,
        "loadavg_1min_range": [
            min(r["loadavg"][0] for r in soak.samples),
            max(r["loadavg"][0] for r in soak.samples),
        ]
        if soak.samples
        else [],
    }


def _at_boundary(soak: Soak, duration_s: float, armed: bool, done: set[str]) -> bool:
    """The phase boundary's disruption, if one is due (HEAD/JOB/DISK_*_AT); returns armed."""
    share = soak.now() / duration_s
    if not armed and "head" not in done and share >= HEAD_RESTART_AT:
        done.add("head")
        _set_armed(soak, False)
        soak.runs[-1].stop()
        soak.heads[-1].stop(timeout=5.0)
        soak.event("head stopped")
        _wait(soak, soak.now() + 30.0)  # watch sees no Ray for a while
        _start_job(soak, _start_head(soak, same_address_as=soak.heads[-1]))
        return True  # the new job armed its fault itself
    if not armed and "job" not in done and share >= JOB_RESTART_AT:
        done.add("job")
        _set_armed(soak, False)
        soak.runs[-1].stop()
        soak.event("job stopped")
        _start_job(soak, soak.heads[-1])
        return True
    _set_armed(soak, armed)
    if armed and "disk" not in done and share >= DISK_FULL_AT and soak.disk is not None:
        done.add("disk")
        _fill_disk(soak)
    return armed


def main(duration_s: float = DURATION_S, out: Path | None = None) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="hd-soak-"))
    soak = Soak(work)
    result: dict[str, Any] = {}
    stop = threading.Event()
    sampler = threading.Thread(target=_sampler, args=(soak, stop), daemon=True)
    try:
        head = _start_head(soak)
        _start_job(soak, head)
        soak.watch = _start_watch(soak, head.dashboard_url)
        sampler.start()
        done: set[str] = set()
        armed = True
        next_toggle = soak.now() + PHASE_S
        full_until: float | None = None
        while soak.now() < duration_s:
            until = min(next_toggle, duration_s)
            if full_until is not None:
                until = min(until, full_until)
            _wait(soak, until)
            if full_until is not None and soak.now() >= full_until:
                _free_disk(soak)
                full_until = None
            if soak.now() >= duration_s:
                break
            if soak.now() < next_toggle:
                continue
            armed = _at_boundary(soak, duration_s, not armed, done)
            if soak.filler is not None and full_until is None:
                full_until = soak.now() + DISK_FULL_S
            next_toggle = soak.now() + PHASE_S
        soak.event("end")
    finally:
        stop.set()
        if sampler.is_alive():
            sampler.join(timeout=30)
        if soak.watch is not None and soak.watch.poll() is None:
            soak.watch.send_signal(signal.SIGTERM)
            try:
                soak.watch.wait(timeout=60)
            except subprocess.TimeoutExpired:
                soak.watch.kill()
                soak.watch.wait()
        for run in soak.runs:
            run.stop()
        for head in soak.heads:
            head.stop()
        result = {
            "summary": summary(soak, duration_s) if soak.samples else {},
            "events": soak.events,
            "samples": soak.samples,
            "watch_exit": None if soak.watch is None else soak.watch.returncode,
            "work_dir": str(work),
        }
        if soak.disk is not None:
            _free_disk(soak)
            subprocess.run(["umount", "-l", str(soak.disk)], check=False)
        if out is not None:
            out.write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration-s", type=float, default=DURATION_S)
    ap.add_argument("--phase-s", type=float, default=PHASE_S)
    ap.add_argument("--warmup-s", type=float, default=WARMUP_S)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--nodes", type=int, choices=(1, 2), default=NODES)
    ap.add_argument("--disk-full-s", type=float, default=DISK_FULL_S)
    ns = ap.parse_args()
    PHASE_S, WARMUP_S, NODES, DISK_FULL_S = ns.phase_s, ns.warmup_s, ns.nodes, ns.disk_full_s
    # SIGTERM (and SIGINT, which a background job ignores) end the soak through its cleanup
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    res = main(ns.duration_s, ns.out)
    print(json.dumps(res["summary"], indent=1))
    sys.exit(0)
