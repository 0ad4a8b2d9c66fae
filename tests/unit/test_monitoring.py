"""The watchdog in Grafana and Alertmanager (slime_hangdoctor/monitoring/): the dashboard is what
its generator writes, every panel and rule queries metrics the real watchdog writes, and the alert
rules pass `promtool check rules` and fire, under `promtool test rules`, on the series the real
watchdog wrote.

The series are the textfiles of the real `check` CLI, tick by tick, recorded by
tests/fixtures/watchdog/capture_prom_series.py: the demo job whose engine gets stuck after three
healthy steps (`stall/`), the healthy demo job (`progressing/`), and an address where no Ray
answers (`unknown/`). For promtool each recorded tick is one minute of its clock (`STEP`), with
the label node-exporter's scrape adds (`transforms.prom_add_label`); the watchdog's own timestamp
is put on that clock, and a watchdog that keeps its last state (or stops) is its last tick held.
promtool comes from Debian's `prometheus` package (installed by apt where the test can, else the
tests that need it are skipped with the reason)."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.debian_tools import require_tool
from tests.fixtures.transforms import prom_add_label

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "slime_hangdoctor" / "monitoring"
DASHBOARD = MONITORING / "grafana-dashboard.json"
RULES = MONITORING / "prometheus-rules.yml"
SERIES = ROOT / "tests" / "fixtures" / "watchdog"
INSTANCE = "node1:9100"
STEP_S = 60  # one recorded tick = one minute of promtool's clock
_METRIC = re.compile(r"\bslime_hangdoctor_[a-z_]+\b")


def _ticks(scenario: str) -> list[dict[str, Any]]:
    ticks: list[dict[str, Any]] = json.loads((SERIES / scenario / "ticks.json").read_text())
    for t in ticks:
        text = (SERIES / scenario / f"tick-{t['tick']:02d}.prom").read_text()
        t["text"] = prom_add_label(text, "instance", INSTANCE)
    return ticks


def _written(scenario: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], dict[int, float]]:
    """(metric, labels) -> {tick: value}, from the recorded textfiles."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[tuple[str, tuple[tuple[str, str], ...]], dict[int, float]] = {}
    for t in _ticks(scenario):
        for family in text_string_to_metric_families(t["text"]):
            for s in family.samples:
                key = (s.name, tuple(sorted(s.labels.items())))
                out.setdefault(key, {})[t["tick"]] = s.value
    return out


SCENARIOS = ("stall", "progressing", "unknown", "probes_timing_out", "idle")


def _names_written() -> set[str]:
    return {name for scenario in SCENARIOS for name, _ in _written(scenario)}


def _dashboard_queries() -> list[str]:
    doc = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]
    exprs += [v["query"] for v in doc["templating"]["list"] if v["type"] == "query"]
    return exprs


def _rule_exprs() -> list[str]:
    doc = yaml.safe_load(RULES.read_text())
    return [r["expr"] for g in doc["groups"] for r in g["rules"]]


def queried_metrics() -> set[str]:
    """Every metric a panel of the dashboard or an alert rule names."""
    return {m for expr in _dashboard_queries() + _rule_exprs() for m in _METRIC.findall(expr)}


def test_the_recordings_hold_a_stall_a_progressing_job_and_a_blind_watchdog() -> None:
    """What the recordings are: the stall WARNING then CRITICAL with a culprit, the healthy job
    OK throughout, the watchdog without Ray UNKNOWN, its probes of a silent engine timing out."""
    exits = {s: [t["exit"] for t in _ticks(s)] for s in SCENARIOS}
    assert exits["stall"][0] == 1 and exits["stall"][-1] == 2  # WARNING, then CRITICAL
    assert set(exits["progressing"]) == {0} and set(exits["unknown"]) == {3}
    timed_out = (
        "slime_hangdoctor_probe_outcomes",
        (("instance", INSTANCE), ("outcome", "timed_out"), ("source", "sglang")),
    )
    assert set(_written("probes_timing_out")[timed_out].values()) == {10.0}
    culprits = [k for k in _written("stall") if k[0] == "slime_hangdoctor_culprit_info"]
    assert culprits, "the stall's textfile names no culprit"


def test_every_panel_and_rule_queries_metrics_the_watchdog_writes() -> None:
    written = _names_written()
    for expr in _dashboard_queries() + _rule_exprs():
        named = set(_METRIC.findall(expr))
        assert named, expr
        assert named <= written, (expr, named - written)
    # and every metric the watchdog writes is on the dashboard
    shown = {m for expr in _dashboard_queries() for m in _METRIC.findall(expr)}
    assert written <= shown, written - shown


def _generator() -> Any:
    spec = importlib.util.spec_from_file_location(
        "make_grafana_dashboard", ROOT / "scripts" / "make_grafana_dashboard.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_regenerating_the_dashboard_gives_the_committed_file() -> None:
    pytest.importorskip("grafana_foundation_sdk", reason="the monitoring extra is not installed")
    assert _generator().dashboard_json() == DASHBOARD.read_text(), (
        "regenerate with `python scripts/make_grafana_dashboard.py` and review the diff"
    )


def test_promtool_checks_the_rules() -> None:
    promtool = require_tool("promtool", "prometheus")
    done = subprocess.run(
        [promtool, "check", "rules", str(RULES)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 8 rules found" in done.stdout


# --------------------------------------------------------------------------- promtool test rules


def _series(
    scenario: str, *, hold: int, stop: bool = False, gone: bool = False
) -> list[dict[str, str]]:
    """promtool's input series of a recording: a value per tick, then the last tick held `hold`
    more steps. A series that a tick's file no longer holds is `stale` there, as Prometheus marks
    a series a scrape no longer returns ('_', no sample, before it first appears and after it is
    stale). The watchdog's own timestamp is the tick's time on promtool's clock; `stop`: the
    watchdog stops after its last tick (node-exporter keeps serving the last file, so its
    timestamp stays); `gone`: the textfile is gone after the last tick (every series stale)."""
    ticks = [t["tick"] for t in _ticks(scenario)]
    out = []
    for (name, labels), written in sorted(_written(scenario).items()):
        values = written
        if name == "slime_hangdoctor_last_run_timestamp_seconds":
            values = {i: float(i * STEP_S) for i in written}
        steps = []
        for i in ticks:
            if i in values:
                steps.append(repr(values[i]))
            elif steps and steps[-1] not in ("_", "stale"):
                steps.append("stale")
            else:
                steps.append("_")
        last = values.get(ticks[-1])
        if hold and last is not None:
            per_step = 0 if stop or "timestamp" not in name else STEP_S
            steps.append(f"{last + per_step!r}+{per_step}x{hold}")
        if gone and last is not None:
            steps.append("stale")
        selector = ",".join(f'{k}="{v}"' for k, v in labels)
        out.append({"series": f"{name}{{{selector}}}", "values": " ".join(steps)})
    return out


def _alert(name: str, at_min: int, **labels: str) -> dict[str, Any]:
    return {"eval_time": f"{at_min}m", "alertname": name, "exp_alerts": [labels] if labels else []}


def _run_promtool(tmp_path: Path, tests: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    promtool = require_tool("promtool", "prometheus")
    doc = {"rule_files": [str(RULES)], "evaluation_interval": "1m", "tests": tests}
    path = tmp_path / "rules-test.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return subprocess.run(
        [promtool, "test", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


PAGE = ("role", "node_ip", "pid", "submission_id")
DOCS = "docs"  # the runbook's base where no external label `slime_hangdoctor_docs` is set


def _page(scenario: str, tick: int) -> dict[str, str]:
    """The labels of the recorded `slime_hangdoctor_page_info` series written at `tick`."""
    rows = [
        dict(labels)
        for (name, labels), values in _written(scenario).items()
        if name == "slime_hangdoctor_page_info" and tick in values
    ]
    assert len(rows) == 1, f"one page series per textfile, got {rows}"
    return rows[0]


def _steady(scenario: str, since: int) -> int:
    """The first tick from `since` on after which the page's culprit and job stay the same to
    the last tick (an alert joined with them fires `for:` after that)."""
    ticks = [t["tick"] for t in _ticks(scenario)]
    last = {k: _page(scenario, ticks[-1])[k] for k in PAGE}
    steady = ticks[-1]
    for tick in reversed([t for t in ticks if t >= since]):
        if {k: _page(scenario, tick)[k] for k in PAGE} != last:
            break
        steady = tick
    return steady


def _annotations(name: str, summary: str, page: dict[str, str] | None = None,
                 docs: str = DOCS) -> dict[str, str]:  # fmt: skip
    out = {"summary": summary, "runbook_url": f"{docs}/runbook.md#{name.lower()}"}
    if page is not None:  # each part only where the page has it
        culprit = ""
        if page["role"]:
            culprit = f"Culprit: {page['role']}"
            culprit += f" pid {page['pid']}" if page["pid"] else ""
            culprit += f" on {page['node_ip']}" if page["node_ip"] else ""
            culprit += ". "
        job = f"Job: {page['submission_id']}." if page["submission_id"] else ""
        out["description"] = (culprit + job).strip()
    return out


def _firing(
    name: str, at_min: int, labels: dict[str, str], annotations: dict[str, str]
) -> dict[str, Any]:
    return {
        "eval_time": f"{at_min}m",
        "alertname": name,
        "exp_alerts": [{"exp_labels": labels, "exp_annotations": annotations}],
    }


def _stall_tests() -> tuple[dict[str, Any], list[dict[str, str]]]:
    """The stall, its watchdog running on: SlimeJobStalled a minute after its first CRITICAL tick
    (once the culprit it names is steady), SlimeJobHung 10 minutes after its first hung verdict,
    both then at once with the same instance and job: the inhibit rule's inputs. Returns the test
    and the two alerts' labels (for Alertmanager)."""
    stall = _ticks("stall")
    critical = next(t["tick"] for t in stall if t["exit"] == 2)
    hung_status = ("slime_hangdoctor_status", (("instance", INSTANCE), ("status", "hung")))
    hung = min(i for i, v in _written("stall")[hung_status].items() if v == 1.0)
    last = stall[-1]["tick"]
    page = _page("stall", last)
    assert page["bundle"], "the stall's page names no stall bundle (--bundle-dir)"
    assert page["role"] and page["pid"] and page["submission_id"], page
    joined = {k: page[k] for k in PAGE}
    stalled_at = max(critical, _steady("stall", critical)) + 1
    hung_at = max(hung, _steady("stall", hung)) + 10
    both = max(stalled_at, hung_at, last) + 1
    stalled = {"instance": INSTANCE, "severity": "critical", "stage": "rollout_dispatch", **joined}
    hung_labels = {"instance": INSTANCE, "severity": "critical", **joined}
    stalled_notes = {
        **_annotations("SlimeJobStalled", f"slime job stalled in rollout_dispatch on {INSTANCE}",
                       page),
        "bundle": page["bundle"],
    }  # fmt: skip
    hung_notes = _annotations("SlimeJobHung", f"slime job hung for 10+ minutes on {INSTANCE}", page)
    test = {
        "interval": "1m",
        "input_series": _series("stall", hold=both + 2 - last),
        "alert_rule_test": [
            _alert("SlimeJobStalled", stalled_at - 1),  # pending: not yet for 1m
            _firing("SlimeJobStalled", stalled_at, stalled, stalled_notes),
            _alert("SlimeJobHung", hung_at - 1),
            _firing("SlimeJobHung", hung_at, hung_labels, hung_notes),
            # the inhibition's inputs: both fire at once, with the same instance and job
            _firing("SlimeJobStalled", both, stalled, stalled_notes),
            _firing("SlimeJobHung", both, hung_labels, hung_notes),
            _alert("SlimeHangdoctorNotRunning", both),  # it kept running
            _alert("SlimeHangdoctorBlind", both),
            _alert("SlimeHangdoctorProbesFailing", both),
            _alert("SlimeHangdoctorSeesNoJob", both),
            _alert("SlimeHangdoctorAbsent", both),
        ],
    }
    return test, [{"alertname": "SlimeJobStalled", **stalled},
                  {"alertname": "SlimeJobHung", **hung_labels}]  # fmt: skip


def _without_culprit(series: list[dict[str, str]]) -> list[dict[str, str]]:
    """The recorded series with the page's culprit labels emptied (a named transformation: a
    hung verdict that names no culprit writes them empty, watchdog/prom.py)."""
    out = []
    for s in series:
        name = s["series"]
        if name.startswith("slime_hangdoctor_page_info{"):
            name = re.sub(r'\b(role|node_ip|pid)="[^"]*"', r'\1=""', name)
        out.append({**s, "series": name})
    return out


def _hung_without_culprit() -> dict[str, Any]:
    """SlimeJobHung on the stall's series with no culprit named: it still fires, its description
    says only the job."""
    test, (_, hung) = _stall_tests()
    at = int(next(c for c in test["alert_rule_test"] if c["alertname"] == "SlimeJobHung"
                  and c["exp_alerts"])["eval_time"].rstrip("m"))  # fmt: skip
    labels = {k: v for k, v in hung.items() if k not in ("alertname", "role", "node_ip", "pid")}
    page = {"role": "", "node_ip": "", "pid": "", "submission_id": hung["submission_id"]}
    notes = _annotations("SlimeJobHung", f"slime job hung for 10+ minutes on {INSTANCE}", page)
    assert notes["description"] == f"Job: {hung['submission_id']}."
    return {
        "interval": "1m",
        "input_series": _without_culprit(test["input_series"]),
        "alert_rule_test": [_firing("SlimeJobHung", at, labels, notes)],
    }


def _promtool_tests() -> list[dict[str, Any]]:
    n_progressing = len(_ticks("progressing"))
    warning = {"instance": INSTANCE, "severity": "warning"}
    info = {"instance": INSTANCE, "severity": "info"}
    idle_first = _ticks("idle")[0]["tick"]
    return [
        _stall_tests()[0],
        _hung_without_culprit(),
        {  # the healthy job, its watchdog running on for 3 hours: nothing fires
            "interval": "1m",
            "input_series": _series("progressing", hold=180),
            "alert_rule_test": [
                _alert(name, n_progressing + 179)
                for name in (
                    "SlimeJobStalled",
                    "SlimeJobHung",
                    "SlimeHangdoctorNotRunning",
                    "SlimeHangdoctorBlind",
                    "SlimeHangdoctorProbesFailing",
                    "SlimeHangdoctorAbsent",
                    "SlimeHangdoctorAbsentEverywhere",
                    "SlimeHangdoctorSeesNoJob",
                )
            ],
        },
        {  # the healthy job's watchdog stops after its last tick: its textfile ages
            "interval": "1m",
            "input_series": _series("progressing", hold=10, stop=True),
            "alert_rule_test": [
                _alert("SlimeHangdoctorNotRunning", n_progressing - 1 + 5),
                _firing(
                    "SlimeHangdoctorNotRunning",
                    n_progressing - 1 + 6,
                    warning,
                    _annotations(
                        "SlimeHangdoctorNotRunning",
                        f"slime-hangdoctor has not run for 5+ minutes on {INSTANCE}",
                    ),
                ),
            ],
        },
        {  # the healthy job's textfile is gone after its last tick (removed, node-exporter
            # down): this instance's watchdog is absent 15 minutes after, by its instance
            "interval": "1m",
            "input_series": _series("progressing", hold=0, gone=True),
            "alert_rule_test": [
                _alert("SlimeHangdoctorAbsent", n_progressing - 1 + 15),
                _firing(
                    "SlimeHangdoctorAbsent",
                    n_progressing - 1 + 16,
                    {"instance": INSTANCE, "severity": "warning"},
                    _annotations(
                        "SlimeHangdoctorAbsent",
                        f"no slime-hangdoctor textfile is scraped from {INSTANCE}",
                    ),
                ),
            ],
        },
        {  # a watchdog that cannot reach Ray: blind after 10 minutes of exit 3
            "interval": "1m",
            "input_series": _series("unknown", hold=12),
            "alert_rule_test": [
                _alert("SlimeHangdoctorBlind", 9),
                _firing(
                    "SlimeHangdoctorBlind",
                    10,
                    warning,
                    _annotations(
                        "SlimeHangdoctorBlind",
                        f"slime-hangdoctor cannot diagnose the job on {INSTANCE} (exit 3)",
                    ),
                ),
                _alert("SlimeJobStalled", 14),
            ],
        },
        {  # a Ray cluster with no job: IDLE (OK), and after 2 hours of it, an info alert
            "interval": "1m",
            "input_series": _series("idle", hold=125),
            "alert_rule_test": [
                _alert("SlimeHangdoctorSeesNoJob", idle_first + 119),
                _firing(
                    "SlimeHangdoctorSeesNoJob",
                    idle_first + 121,
                    info,
                    _annotations(
                        "SlimeHangdoctorSeesNoJob",
                        f"slime-hangdoctor has seen no slime job on {INSTANCE} for 2 hours",
                    ),
                ),
                _alert("SlimeHangdoctorBlind", idle_first + 121),
                _alert("SlimeJobHung", idle_first + 121),
            ],
        },
        {  # no textfile at all (the watchdog never ran anywhere): absent after 15 minutes
            "interval": "1m",
            "input_series": [],
            "alert_rule_test": [
                _alert("SlimeHangdoctorAbsentEverywhere", 14),
                _firing(
                    "SlimeHangdoctorAbsentEverywhere",
                    15,
                    {"severity": "warning"},
                    {
                        "summary": "no slime-hangdoctor textfile is scraped anywhere",
                        "runbook_url": f"{DOCS}/runbook.md#slimehangdoctorabsent",
                    },
                ),
                _alert("SlimeHangdoctorAbsent", 15),  # no instance ever had one
            ],
        },
        {  # probes of an engine that accepts and never answers: failing after 15 minutes
            "interval": "1m",
            "input_series": _series("probes_timing_out", hold=16),
            "alert_rule_test": [
                _alert("SlimeHangdoctorProbesFailing", 14),
                _firing(
                    "SlimeHangdoctorProbesFailing",
                    15,
                    {**info, "source": "sglang"},
                    _annotations(
                        "SlimeHangdoctorProbesFailing",
                        f"slime-hangdoctor's sglang probes fail on {INSTANCE}",
                    ),
                ),
            ],
        },
        {  # the runbook link with the external label that names where docs/ is served
            "interval": "1m",
            "external_labels": {"slime_hangdoctor_docs": "https://docs.example.org/hd"},
            "input_series": _series("unknown", hold=12),
            "alert_rule_test": [
                _firing(
                    "SlimeHangdoctorBlind",
                    10,
                    warning,
                    _annotations(
                        "SlimeHangdoctorBlind",
                        f"slime-hangdoctor cannot diagnose the job on {INSTANCE} (exit 3)",
                        docs="https://docs.example.org/hd",
                    ),
                ),
            ],
        },
    ]


def test_promtool_fires_each_alert_on_the_series_the_watchdog_wrote(tmp_path: Path) -> None:
    done = _run_promtool(tmp_path, _promtool_tests())
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_alert_routes_and_links_its_runbook() -> None:
    """Severities Alertmanager trees route on, a runbook section per alert, and every alert
    covered by the promtool tests above."""
    rules = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    runbook = (ROOT / "docs" / "runbook.md").read_text()
    sections = {ln[3:].strip().lower() for ln in runbook.splitlines() if ln.startswith("## ")}
    tested = {
        case["alertname"]
        for t in _promtool_tests()
        for case in t["alert_rule_test"]
        if case["exp_alerts"]
    }
    for rule in rules:
        assert rule["labels"]["severity"] in ("critical", "warning", "info"), rule
        anchor = rule["annotations"]["runbook_url"].rsplit("#", 1)[1]
        assert anchor in sections, (rule["alert"], anchor)
        assert rule["alert"] in tested, f"no promtool test fires {rule['alert']}"


def test_promtool_test_rules_fails_a_wrong_expectation(tmp_path: Path) -> None:
    """The control: promtool does compare (a stall that is said not to fire fails the test)."""
    stall = _stall_tests()[0]
    firing = [c for c in stall["alert_rule_test"] if c["exp_alerts"]][-2]  # SlimeJobStalled
    assert firing["alertname"] == "SlimeJobStalled"
    wrong = {**stall, "alert_rule_test": [{**firing, "exp_alerts": []}]}
    done = _run_promtool(tmp_path, [wrong])
    assert done.returncode != 0 and "SlimeJobStalled" in done.stdout + done.stderr


# --------------------------------------------------------------------------- Alertmanager

ALERTMANAGER = MONITORING / "alertmanager.yml"


def test_amtool_checks_the_alertmanager_file() -> None:
    amtool = require_tool("amtool", "prometheus-alertmanager")
    done = subprocess.run(
        [amtool, "check-config", str(ALERTMANAGER)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def _alertmanager(tmp_path: Path) -> Any:
    """A real Alertmanager (Debian's prometheus-alertmanager) on a free local port with the
    shipped file; yields its base URL."""
    import contextlib
    import socket
    import time
    import urllib.request

    binary = require_tool("prometheus-alertmanager", "prometheus-alertmanager")

    @contextlib.contextmanager
    def running() -> Any:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        proc = subprocess.Popen(
            [binary, f"--config.file={ALERTMANAGER}", f"--storage.path={tmp_path / 'am'}",
             f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    urllib.request.urlopen(f"{url}/-/ready", timeout=2).read()
                    break
                except OSError:
                    if time.monotonic() > deadline or proc.poll() is not None:
                        why = proc.stderr.read().decode() if proc.stderr else ""
                        raise AssertionError(why) from None
                    time.sleep(0.2)
            yield url
        finally:
            proc.terminate()
            proc.wait(timeout=10)

    return running()


def _states(url: str, alerts: list[dict[str, str]]) -> dict[str, dict[str, Any]]:
    """POST the alerts (as Prometheus sends them), then each one's status as Alertmanager says."""
    import time
    import urllib.request

    body = json.dumps([{"labels": a} for a in alerts]).encode()
    req = urllib.request.Request(
        f"{url}/api/v2/alerts", data=body, headers={"Content-Type": "application/json"}
    )
    urllib.request.urlopen(req, timeout=5).read()
    deadline = time.monotonic() + 20
    while True:
        got = json.loads(urllib.request.urlopen(f"{url}/api/v2/alerts", timeout=5).read())
        states = {
            f"{a['labels']['alertname']}/{a['labels'].get('submission_id', '')}": a["status"]
            for a in got
        }
        # inhibitions are computed as alerts arrive; wait until every alert has a state
        if len(states) == len(alerts) and all(s["state"] != "unprocessed" for s in states.values()):
            return states
        if time.monotonic() > deadline:
            raise AssertionError(got)
        time.sleep(0.2)


def test_alertmanager_keeps_stalled_quiet_while_hung_fires_for_the_same_job(
    tmp_path: Path,
) -> None:
    """The shipped inhibit rule in a real Alertmanager, fed the two alerts exactly as promtool
    says the rules fire them on the recorded stall (same instance, same job): SlimeJobStalled is
    suppressed by SlimeJobHung; the same pair for another job (another submission id) is not."""
    _, (stalled, hung) = _stall_tests()
    other = {**stalled, "submission_id": "raysubmit_another_job"}
    with _alertmanager(tmp_path) as url:
        states = _states(url, [stalled, hung, other])
    job = stalled["submission_id"]
    assert states[f"SlimeJobStalled/{job}"]["state"] == "suppressed", states
    assert states[f"SlimeJobStalled/{job}"]["inhibitedBy"], states
    assert states[f"SlimeJobHung/{job}"]["state"] == "active", states
    assert states["SlimeJobStalled/raysubmit_another_job"]["state"] == "active", states


if __name__ == "__main__":  # print the promtool test file, for a look
    print(json.dumps(_series(sys.argv[1], hold=0), indent=1))
