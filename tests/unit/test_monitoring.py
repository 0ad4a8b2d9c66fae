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


SCENARIOS = ("stall", "progressing", "unknown", "probes_timing_out")


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
    assert "SUCCESS: 6 rules found" in done.stdout


# --------------------------------------------------------------------------- promtool test rules


def _series(scenario: str, *, hold: int, stop: bool = False) -> list[dict[str, str]]:
    """promtool's input series of a recording: a value per tick ('_' where that tick's file had no
    such series), then the last tick held `hold` more steps. The watchdog's own timestamp is the
    tick's time on promtool's clock; `stop`: the watchdog stops after its last tick (node-exporter
    keeps serving the last file, so its timestamp stays)."""
    ticks = [t["tick"] for t in _ticks(scenario)]
    out = []
    for (name, labels), written in sorted(_written(scenario).items()):
        values = written
        if name == "slime_hangdoctor_last_run_timestamp_seconds":
            values = {i: float(i * STEP_S) for i in written}
        steps = [repr(values[i]) if i in values else "_" for i in ticks]
        last = values.get(ticks[-1])
        if hold and last is not None:
            per_step = 0 if stop or "timestamp" not in name else STEP_S
            steps.append(f"{last + per_step!r}+{per_step}x{hold}")
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


def _firing(name: str, at_min: int, labels: dict[str, str], summary: str) -> dict[str, Any]:
    annotations = {"summary": summary}
    rule = next(
        r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]
        if r["alert"] == name
    )  # fmt: skip
    if "description" in rule["annotations"]:
        annotations["description"] = rule["annotations"]["description"].replace(
            "{{ $labels.instance }}", labels["instance"]
        )
    return {
        "eval_time": f"{at_min}m",
        "alertname": name,
        "exp_alerts": [{"exp_labels": labels, "exp_annotations": annotations}],
    }


def test_promtool_fires_each_alert_on_the_series_the_watchdog_wrote(tmp_path: Path) -> None:
    stall = _ticks("stall")
    critical = next(t["tick"] for t in stall if t["exit"] == 2)
    hung_status = ("slime_hangdoctor_status", (("instance", INSTANCE), ("status", "hung")))
    hung = min(i for i, v in _written("stall")[hung_status].items() if v == 1.0)
    last = stall[-1]["tick"]
    page = {"instance": INSTANCE, "severity": "page"}
    ticket = {"instance": INSTANCE, "severity": "ticket"}
    stage = {**page, "stage": "rollout_dispatch"}
    tests = [
        {  # the stall: stalled (the watchdog's CRITICAL) a minute after its first CRITICAL tick;
            # hung for 10 minutes since its first hung verdict
            "interval": "1m",
            "input_series": _series("stall", hold=15),
            "alert_rule_test": [
                _alert("SlimeJobStalled", critical),  # pending: not yet for 1m
                _firing(
                    "SlimeJobStalled",
                    critical + 1,
                    stage,
                    f"slime job stalled in rollout_dispatch on {INSTANCE}",
                ),
                _alert("SlimeJobHung", hung + 9),
                _firing(
                    "SlimeJobHung", hung + 10, page, f"slime job hung for 10+ minutes on {INSTANCE}"
                ),
                _alert("SlimeHangdoctorNotRunning", last + 15),  # it kept running
                _alert("SlimeHangdoctorBlind", last + 15),
                _alert("SlimeHangdoctorProbesFailing", last + 15),
            ],
        },
        {  # the healthy job, its watchdog running on for 20 minutes: nothing fires
            "interval": "1m",
            "input_series": _series("progressing", hold=20),
            "alert_rule_test": [
                _alert(name, len(_ticks("progressing")) + 19)
                for name in (
                    "SlimeJobStalled",
                    "SlimeJobHung",
                    "SlimeHangdoctorNotRunning",
                    "SlimeHangdoctorBlind",
                    "SlimeHangdoctorProbesFailing",
                    "SlimeHangdoctorAbsent",
                )
            ],
        },
        {  # the healthy job's watchdog stops after its last tick: its textfile ages
            "interval": "1m",
            "input_series": _series("progressing", hold=10, stop=True),
            "alert_rule_test": [
                _alert("SlimeHangdoctorNotRunning", len(_ticks("progressing")) - 1 + 5),
                _firing(
                    "SlimeHangdoctorNotRunning",
                    len(_ticks("progressing")) - 1 + 6,
                    ticket,
                    f"slime-hangdoctor has not run for 5+ minutes on {INSTANCE}",
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
                    ticket,
                    f"slime-hangdoctor cannot diagnose the job on {INSTANCE} (exit 3)",
                ),
                _alert("SlimeJobStalled", 14),
            ],
        },
        {  # no textfile at all (the watchdog never ran): absent after 15 minutes
            "interval": "1m",
            "input_series": [],
            "alert_rule_test": [
                _alert("SlimeHangdoctorAbsent", 14),
                _firing(
                    "SlimeHangdoctorAbsent",
                    15,
                    {"severity": "ticket"},
                    "no slime-hangdoctor textfile is scraped",
                ),
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
                    {**ticket, "source": "sglang"},
                    f"slime-hangdoctor's sglang probes fail on {INSTANCE}",
                ),
            ],
        },
    ]
    done = _run_promtool(tmp_path, tests)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_promtool_test_rules_fails_a_wrong_expectation(tmp_path: Path) -> None:
    """The control: promtool does compare (a stall that is said not to fire fails the test)."""
    critical = next(t["tick"] for t in _ticks("stall") if t["exit"] == 2)
    tests = [
        {
            "interval": "1m",
            "input_series": _series("stall", hold=5),
            "alert_rule_test": [_alert("SlimeJobStalled", critical + 2)],
        }
    ]
    done = _run_promtool(tmp_path, tests)
    assert done.returncode != 0 and "SlimeJobStalled" in done.stdout + done.stderr


if __name__ == "__main__":  # print the promtool test file, for a look
    print(json.dumps(_series(sys.argv[1], hold=0), indent=1))
