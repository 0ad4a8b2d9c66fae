"""Generate the Grafana dashboard of the watchdog's Prometheus textfile
(slime_hangdoctor/monitoring/grafana-dashboard.json) with grafana-foundation-sdk, Grafana's own
builder (the `monitoring` extra pins it):

    python3 -m pip install -e '.[monitoring]'
    python scripts/make_grafana_dashboard.py          # rewrite the JSON
    python scripts/make_grafana_dashboard.py --check  # write nothing; exit 1 if it is out of date

The JSON is committed, importable as is (Dashboards > New > Import): it asks for a Prometheus data
source (the `datasource` variable) and lists the watchdog's instances (`instance`, the label
node-exporter's textfile collector gives every series of the textfile). Every query names only
metrics that watchdog/prom.py writes (tests/unit/test_monitoring.py checks it on textfiles the
real watchdog wrote).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from grafana_foundation_sdk.builders import dashboard as gd
from grafana_foundation_sdk.builders import prometheus, stat, statetimeline, table, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "slime_hangdoctor" / "monitoring" / "grafana-dashboard.json"
UID = "slime-hangdoctor"
DS = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")
SEL = 'instance=~"$instance"'

# the watchdog's exit codes (docs/watchdog.md), as the panels show them
EXIT_MAPPINGS: list[dm.ValueMapping] = [
    dm.ValueMap(
        options={
            "0": dm.ValueMappingResult(text="OK", color="green", index=0),
            "1": dm.ValueMappingResult(text="WARNING: no progress yet", color="orange", index=1),
            "2": dm.ValueMappingResult(text="CRITICAL: stalled", color="red", index=2),
            "3": dm.ValueMappingResult(text="UNKNOWN: cannot diagnose", color="purple", index=3),
        }
    )
]

JOB_SEEN_MAPPINGS: list[dm.ValueMapping] = [
    dm.ValueMap(
        options={
            "0": dm.ValueMappingResult(text="no job seen", color="blue", index=0),
            "1": dm.ValueMappingResult(text="job seen", color="green", index=1),
        }
    )
]


def query(
    expr: str, legend: str = "", *, instant: bool = False, ref: str = "A"
) -> prometheus.Dataquery:
    q = prometheus.Dataquery().expr(expr).ref_id(ref).datasource(DS)
    if legend:
        q = q.legend_format(legend)
    if instant:
        q = q.instant().format(PromQueryFormat.TABLE)
    return q


def thresholds(*steps: tuple[float | None, str]) -> gd.ThresholdsConfig:
    return (
        gd.ThresholdsConfig()
        .mode(dm.ThresholdsMode.ABSOLUTE)
        .steps([dm.Threshold(value=value, color=colour) for value, colour in steps])
    )


def build() -> dm.Dashboard:
    instance = (
        gd.QueryVariable("instance")
        .label("instance")
        .datasource(DS)
        .query("label_values(slime_hangdoctor_exit_code, instance)")
        .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .multi(True)
        .include_all(True)
    )
    datasource = gd.DatasourceVariable("datasource").label("Prometheus").type("prometheus")
    verdict = (
        stat.Panel()
        .title("Verdict")
        .description("The watchdog's last exit code per instance (docs/watchdog.md).")
        .with_target(
            query(f"max by (instance) (slime_hangdoctor_exit_code{{{SEL}}})", "{{instance}}")
        )
        .mappings(EXIT_MAPPINGS)
        .thresholds(thresholds((None, "green"), (1, "orange"), (2, "red"), (3, "purple")))
        .span(6)
        .height(5)
    )
    status = (
        statetimeline.Panel()
        .title("Status over time")
        .description("hung, progressing, idle or unknown: the verdict's status (one-hot).")
        .with_target(
            query(
                f"max by (instance, status) (slime_hangdoctor_status{{{SEL}}}) == 1",
                "{{instance}} {{status}}",
            )
        )
        .span(18)
        .height(5)
    )
    since = (
        timeseries.Panel()
        .title("Time since the job last made progress")
        .with_target(
            query(
                f"max by (instance) (slime_hangdoctor_seconds_since_progress{{{SEL}}})",
                "{{instance}}",
            )
        )
        .unit("s")
        .span(12)
        .height(8)
    )
    stalled = (
        table.Panel()
        .title("Stalled: the blocked stage")
        .description("1 once no progress was seen for longer than --stall-after, with the stage.")
        .with_target(query(f"slime_hangdoctor_stalled{{{SEL}}} == 1", instant=True))
        .span(12)
        .height(8)
    )
    culprit = (
        table.Panel()
        .title("Culprit")
        .description("The process the others wait for: role, node, pid, rank, engine URL.")
        .with_target(query(f"slime_hangdoctor_culprit_info{{{SEL}}}", instant=True))
        .span(24)
        .height(6)
    )
    page = (
        table.Panel()
        .title("What a page carries")
        .description(
            "The first culprit (role, node, pid), the Ray job's submission id and the stall "
            "bundle: the labels the alerts join in (monitoring/prometheus-rules.yml)."
        )
        .with_target(query(f"slime_hangdoctor_page_info{{{SEL}}}", instant=True))
        .span(24)
        .height(5)
    )
    job_seen = (
        stat.Panel()
        .title("Job seen")
        .description("Whether the last run saw a slime job (0: none found, or blind).")
        .with_target(
            query(f"max by (instance) (slime_hangdoctor_job_seen{{{SEL}}})", "{{instance}}")
        )
        .mappings(JOB_SEEN_MAPPINGS)
        .span(12)
        .height(5)
    )
    version = (
        table.Panel()
        .title("Watchdog version")
        .with_target(query(f"slime_hangdoctor_build_info{{{SEL}}}", instant=True))
        .span(12)
        .height(5)
    )
    probes = (
        timeseries.Panel()
        .title("Probe outcomes of the last run")
        .with_target(
            query(
                f"sum by (source, outcome) (slime_hangdoctor_probe_outcomes{{{SEL}}})",
                "{{source}} {{outcome}}",
            )
        )
        .span(12)
        .height(8)
    )
    runtime = (
        timeseries.Panel()
        .title("The doctor's own run time, and the age of its last run")
        .with_target(
            query(f"slime_hangdoctor_run_duration_seconds{{{SEL}}}", "{{instance}} run time")
        )
        .with_target(
            query(
                f"time() - slime_hangdoctor_last_run_timestamp_seconds{{{SEL}}}",
                "{{instance}} since the last run",
                ref="B",
            )
        )
        .unit("s")
        .span(12)
        .height(8)
    )
    return (
        gd.Dashboard("slime-hangdoctor watchdog")
        .uid(UID)
        .description("The slime-hangdoctor watchdog's verdicts (check / watch --prom-file).")
        .tags(["slime", "slime-hangdoctor"])
        .refresh("1m")
        .time("now-6h", "now")
        .timezone("browser")
        .with_variable(datasource)
        .with_variable(instance)
        .with_row(gd.Row("Verdict"))
        .with_panel(verdict)
        .with_panel(status)
        .with_panel(since)
        .with_panel(stalled)
        .with_panel(culprit)
        .with_panel(page)
        .with_row(gd.Row("The watchdog itself"))
        .with_panel(job_seen)
        .with_panel(version)
        .with_panel(probes)
        .with_panel(runtime)
        .build()
    )


def dashboard_json() -> str:
    return json.dumps(build(), cls=JSONEncoder, sort_keys=True, indent=2) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the JSON is out of date")
    args = parser.parse_args()
    text = dashboard_json()
    current = OUT.read_text() if OUT.exists() else None
    if args.check:
        if current != text:
            print(f"out of date: {OUT.relative_to(ROOT)}")
            return 1
        return 0
    if current != text:
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text(text)
        print(f"wrote: {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
