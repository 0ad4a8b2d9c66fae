"""The HTML report: one self-contained page for an incident ticket or a chat thread.

No network: no script, font, style sheet or image is loaded, and the page says so to the browser
(a Content-Security-Policy of `default-src 'none'`, styles inline only). Top to bottom: the verdict
panel, the culprits, the top three next steps (the first screen: what to do), the wait-for graph
(the culprit's component, render/wait_graph.py, as inline SVG laid out by Graphviz `dot` within the
run's deadline, render/graph_dot.py; a nested list where dot is missing, fails or the graph is too
big), the waits with their evidence, the timeline of the two samples, the process table, the stack
with its deciding frames marked, the findings, the further next steps, blind spots, and the raw
evidence (the JSON report) in collapsible sections.

Every text comes from the job or from a bundle (untrusted): secrets are blanked with redact.py's
`redact_text` (as the bundle's own text was when it was written), non-printable characters are
shown escaped (render/printable.py: control, bidi and zero-width characters), and everything is
HTML-escaped where it is written.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable

from slime_hangdoctor import __version__
from slime_hangdoctor.redact import redact_text
from slime_hangdoctor.render.graph_dot import dot_seconds, dot_source, layout_svg, too_big
from slime_hangdoctor.render.jsonout import report_json
from slime_hangdoctor.render.labels import (
    culprit_details,
    culprit_name,
    headline,
    report_facts,
    split_steps,
)
from slime_hangdoctor.render.printable import map_strings, printable
from slime_hangdoctor.render.wait_graph import KIND_WORDS, Graph, build_graph, fold_alike
from slime_hangdoctor.verdict import SCHEMA, Diagnosis, Status, Timeline, Verdict

__all__ = ["CSP", "Layout", "render_html"]

Layout = Callable[[str, float], tuple[str | None, str]]  # dot source, seconds -> (SVG, why not)

CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src 'none'; font-src 'none'; "
    "connect-src 'none'; script-src 'none'; base-uri 'none'; form-action 'none'"
)
MARKER = "▶"
MAX_TABLE_WAITS = 200  # the waits' table: every wait of a job up to this many (the JSON has all)
RAW_INDENTED_MAX = 256 * 2**10  # the raw JSON indented up to this size, compact beyond
RAW_MAX = 2**20  # a larger JSON report is left out of the page (it would pass 2 MiB); --format json

_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:0;
 color:#1d2327;background:#fff}
main{max-width:1200px;margin:0 auto;padding:16px 24px}
h1{font-size:22px;margin:0 0 6px}h2{font-size:17px;margin:26px 0 8px;border-bottom:1px solid #dde3e7}
.panel{border:2px solid;border-radius:8px;padding:12px 16px}
.status-hung{border-color:#c00000;background:#fff3f3}.status-progressing{border-color:#2f7d32;
 background:#f2fbf2}.status-idle{border-color:#1f5fa8;background:#f1f6fd}.status-unknown{
 border-color:#b8860b;background:#fffbea}
.facts{display:flex;flex-wrap:wrap;gap:4px 18px;margin-top:6px;color:#40484e}
.facts b{color:#1d2327}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{border-bottom:1px solid #e3e8eb;padding:4px 6px;text-align:left;vertical-align:top}
tr.culprit td{background:#ffe9e9;font-weight:600}
.by{color:#555;font-size:.85em}
code,pre,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px}
pre{background:#f6f8fa;padding:8px;overflow-x:auto;white-space:pre-wrap;word-break:break-all}
.graph{overflow:auto;border:1px solid #e3e8eb;border-radius:6px;padding:6px}
.graph svg{max-width:none;height:auto}
figure.waits{margin:0}figcaption{margin:4px 0 8px;color:#40484e}
figcaption .cycle{color:#c00000;font-weight:700}
.graph .node.culprit polygon,.graph .node.culprit path{stroke:#c00000;stroke-width:3px;
 fill:#ffd9d9}
ul.graph-list li.culprit>span.who{color:#c00000;font-weight:700}
.sev-critical{color:#c00000;font-weight:700}.sev-warning{color:#b8620b;font-weight:700}
.sev-info{color:#40484e;font-weight:700}
.frame.deciding{font-weight:700;background:#fff0c2}
.bar-track{position:relative;height:14px;background:#f1f3f5;border-radius:3px;min-width:240px}
.bar{position:absolute;top:2px;height:10px;border-radius:2px;background:#1f5fa8}
.bar.not-ok{background:#b8620b}
.tick{position:absolute;top:0;height:14px;border-left:2px dashed #40484e}
.moved{color:#2f7d32;font-weight:600}.flat{color:#a01c1c}
details{margin:6px 0}summary{cursor:pointer}
footer{margin:30px 0 10px;color:#6b757c;font-size:12px}
"""


def render_html(
    diagnosis: Diagnosis, layout: Layout = layout_svg, time_left_s: float | None = None
) -> str:
    """The whole page (`layout`: the graph's layout engine, `dot` by default, given what is left
    of the run's deadline, `time_left_s`: render/graph_dot.py's `dot_seconds`)."""
    d = map_strings(map_strings(diagnosis, redact_text), printable)
    v = d.verdict
    title = _e(f"slime-hangdoctor: {headline(v)}")
    steps = split_steps(v)
    body = [
        _verdict_panel(d),
        _culprits(d),
        _list_section("next-steps", "Next steps", steps.top, start=1),
        _graph_section(d, layout, time_left_s),
        _timeline(d.timeline),
        _processes(d),
        _stack(d),
        _findings(v),
        _list_section("more-steps", "More next steps", steps.more, start=steps.more_start),
        _list_section("blind-spots", "Blind spots (not seen, so not ruled out)", v.blind_spots),
        _raw(d),
    ]
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en">',
            "<head>",
            '<meta charset="utf-8">',
            f'<meta http-equiv="Content-Security-Policy" content="{_e(CSP)}">',
            '<meta name="referrer" content="no-referrer">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{title}</title>",
            f"<style>{_STYLE}</style>",
            "</head>",
            "<body><main>",
            *[part for part in body if part],
            f"<footer>slime-hangdoctor {_e(__version__)} · schema <code>{_e(SCHEMA)}</code>"
            "</footer>",
            "</main></body>",
            "</html>",
            "",
        ]
    )


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _verdict_panel(d: Diagnosis) -> str:
    v = d.verdict
    facts = "".join(
        f"<span><b>{_e(label)}</b> {_e(value)}</span>"
        for label, value in [("status", v.status.value), *report_facts(d)]
    )
    return (
        f'<section id="verdict" class="panel status-{_e(v.status.value)}">'
        f"<h1>{_e(headline(v))}</h1>"
        f'<p class="summary">{_e(v.summary)}{_by(_summary_by(v))}</p>'
        f'<div class="facts">{facts}</div></section>'
    )


def _graph_section(d: Diagnosis, layout: Layout, time_left_s: float | None) -> str:
    graph = build_graph(d)
    if not graph.nodes:
        return ""
    if too_big(graph):
        graph = fold_alike(graph)
    parts = [
        '<section id="wait-graph"><h2>Who waits for whom</h2><figure class="waits">',
        _graph_caption(graph, d),
    ]
    svg, why = None, too_big(graph)
    if not why:
        seconds = dot_seconds(time_left_s)
        svg, why = layout(dot_source(graph), seconds)
        if svg is None and time_left_s is not None:
            why += f" (it had {seconds:.1f} s: what was left of the run's --timeout)"
    if svg is not None:
        parts.append(f'<div class="graph" id="graph-svg">{svg}</div>')
    else:
        parts.append(
            f'<p class="note" id="graph-note">{_e(why)}: the graph is shown as a list.</p>'
        )
        parts.append(_graph_list(graph))
    parts.append("</figure>")
    if not d.waits:
        parts.append(
            "<p>The analysis found no wait between these processes"
            + (
                " (waits are gathered for a hung job only)."
                if d.verdict.status is not Status.HUNG
                else "."
            )
            + "</p>"
        )
    else:
        parts.append(_wait_table(d, graph))
    parts.append("</section>")
    return "\n".join(parts)


def _graph_caption(graph: Graph, d: Diagnosis) -> str:
    """What the drawing shows: each cycle (its size, processes and waits), and what it leaves out."""
    names = {n.id: n.label for n in graph.nodes}
    lines = [
        f'<div class="cycle" id="cycle-{c}"><span class="cycle">cycle of {len(cycle.numbers)} '
        f"wait{'s' if len(cycle.numbers) != 1 else ''}</span> (cycle {c}): "
        + (
            f"{_e(names[cycle.nodes[0]])} waits for itself "
            if len(cycle.nodes) == 1
            else f"{_e(' → '.join(names[n] for n in cycle.nodes))} wait for each other "
        )
        + f"(waits {', '.join(str(n) for n in cycle.numbers)})</div>"
        for c, cycle in enumerate(graph.cycles, 1)
    ]
    hidden = [
        _count(graph.left_out_processes, "process", "processes"),
        _count(graph.left_out_waits, "wait", "waits"),
    ]
    if graph.alike_folded:
        lines.append(
            f'<div class="alike">{graph.alike_folded} processes are drawn folded with alike ones '
            "(same kind, waiting and waited for in the same ways): "
            '"and N alike" on a node, "×N" on a wait.</div>'
        )
    if any(hidden):
        lines.append(
            f'<div class="left-out">Not drawn: {" and ".join(h for h in hidden if h)} that no '
            f"wait links to {'the culprit' if d.verdict.culprits else 'a wait'} (the tables "
            "below list them).</div>"
        )
    return f"<figcaption>{''.join(lines)}</figcaption>" if lines else ""


def _count(n: int, one: str, many: str) -> str:
    return "" if n == 0 else f"{n} {one if n == 1 else many}"


def _graph_list(graph: Graph) -> str:
    """The graph without a layout engine: node IP > group > process, each with what it waits for."""
    names = {n.id: n.label for n in graph.nodes}
    hosts: dict[str, dict[str, list[str]]] = {}
    for n in graph.nodes:
        waits = [
            f'<li class="wait {_e(e.wait.kind.value)}{"" if e.cycle is None else " cycle"}" '
            f'id="list-w{e.number}">waits for <b>{_e(names[e.target])}</b> '
            f"({e.number}. {_e(KIND_WORDS[e.wait.kind])}"
            + (f" ×{e.alike}" if e.alike > 1 else "")
            + ("" if e.cycle is None else f", cycle {e.cycle + 1}")
            + ")</li>"
            for e in graph.edges
            if e.source == n.id
        ]
        item = (
            f'<li class="proc{" culprit" if n.culprit else ""}{" idle" if n.folded else ""}" '
            f'id="list-{_e(n.id)}"><span class="who">{_e(n.label)}</span> '
            f'<span class="detail">{_e(n.detail)}</span>'
            + (f"<ul>{''.join(waits)}</ul>" if waits else "")
            + "</li>"
        )
        hosts.setdefault(n.node_ip or "node unknown", {}).setdefault(n.group, []).append(item)
    out = ['<ul class="graph-list" id="graph-list">']
    for host, groups in hosts.items():
        out.append(f"<li>node {_e(host)}<ul>")
        for group, items in groups.items():
            out.append(f"<li>{_e(group)}<ul>{''.join(items)}</ul></li>")
        out.append("</ul></li>")
    out.append("</ul>")
    return "".join(out)


def _wait_table(d: Diagnosis, graph: Graph) -> str:
    """Every wait of the job (drawn or not) up to MAX_TABLE_WAITS, numbered as the graph's edges."""
    cycles = {e.number: e.cycle for e in graph.edges if e.cycle is not None}
    more = len(d.waits) - MAX_TABLE_WAITS
    rows = [
        f'<tr id="wait-{i}" class="wait {_e(w.kind.value)}{" cycle" if i in cycles else ""}">'
        f"<td>{i}</td><td>{_e(w.waiter.label)}</td><td>{_e(KIND_WORDS[w.kind])}"
        + (f" (cycle {cycles[i] + 1})" if i in cycles else "")
        + f"</td><td>{_e(w.waited_for.label)}</td>"
        f"<td>{''.join(f'<div class=mono>{_e(line)}</div>' for line in w.evidence)}</td></tr>"
        for i, w in enumerate(d.waits[:MAX_TABLE_WAITS], 1)
    ]
    note = (
        f'<p class="note" id="waits-more">{more} more waits: the raw evidence below (the JSON '
        "report) has every one.</p>"
        if more > 0
        else ""
    )
    return (
        '<table class="waits"><thead><tr><th>#</th><th>waiter</th><th>wait</th>'
        f"<th>waits for</th><th>evidence</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
        + note
    )


def _timeline(t: Timeline | None) -> str:
    if t is None or not (t.spans or t.sample_times):
        return ""
    end = max([s.end_s for s in t.spans] + list(t.sample_times) + [0.001])

    def pct(x: float) -> str:
        return f"{max(0.0, min(100.0, 100.0 * x / end)):.2f}%"

    ticks = "".join(
        f'<span class="tick" style="left:{pct(s)}" title="sample {i}"></span>'
        for i, s in enumerate(t.sample_times)
    )
    rows = []
    for s in t.spans:
        ok = all(outcome == "ok" for outcome, _ in s.outcomes)
        width = max(0.4, 100.0 * (s.end_s - s.start_s) / end)
        bar = (
            f'<div class="bar-track">{ticks}<span class="bar{"" if ok else " not-ok"}" '
            f'style="left:{pct(s.start_s)};width:{min(width, 100.0):.2f}%"></span></div>'
        )
        outcomes = ", ".join(f"{n} {outcome}" for outcome, n in s.outcomes)
        sample = "-" if s.sample is None else str(s.sample)
        rows.append(
            f'<tr class="{"ok" if ok else "not-ok"}"><td>{_e(s.source)}</td><td>{sample}</td>'
            f"<td>{s.start_s:.2f}-{s.end_s:.2f} s</td><td>{bar}</td><td>{_e(outcomes)}</td></tr>"
        )
    starts = ", ".join(f"sample {i} at {s:.2f} s" for i, s in enumerate(t.sample_times))
    parts = [
        '<section id="timeline"><h2>Timeline of the two samples</h2>',
        f"<p>{_e(starts or 'no sample times recorded')} (seconds after the run began).</p>",
        '<table class="probes"><thead><tr><th>source</th><th>sample</th><th>when</th>'
        f"<th></th><th>probes</th></tr></thead><tbody>{''.join(rows)}</tbody></table>",
    ]
    if t.counters:
        counter_rows = "".join(
            f"<tr><td>{_e(c.name)}</td><td>{c.before:g}</td><td>{c.after:g}</td>"
            + (
                '<td class="moved">moved</td>'
                if c.after != c.before
                else '<td class="flat">flat</td>'
            )
            + "</tr>"
            for c in t.counters
        )
        parts.append(
            "<h3>Work counters, first sample to last</h3>"
            '<table class="counters"><thead><tr><th>counter</th><th>first</th><th>last</th>'
            f"<th></th></tr></thead><tbody>{counter_rows}</tbody></table>"
        )
    parts.append("</section>")
    return "\n".join(parts)


def _culprits(d: Diagnosis) -> str:
    if not d.verdict.culprits:
        return ""
    items = []
    for c in d.verdict.culprits:
        details = ", ".join(f"{label} {value}" for label, value in culprit_details(c))
        first, *more = [r for r in c.why.split(" | ") if r.strip()] or [""]
        rest = (
            f"<details><summary>{len(more)} more reason{'s' if len(more) > 1 else ''}</summary>"
            f"<ul>{''.join(f'<li>{_e(r)}</li>' for r in more)}</ul></details>"
            if more
            else ""
        )
        items.append(
            f'<li class="culprit"><b>{_e(culprit_name(c))}</b> <span class="mono">'
            f'{_e(details)}</span><br><span class="why">{_e(first)}</span>{_by(*c.by)}{rest}</li>'
        )
    title = "Culprit" if len(items) == 1 else f"Culprits ({len(items)})"
    return f'<section id="culprits"><h2>{title}</h2><ul>{"".join(items)}</ul></section>'


def _processes(d: Diagnosis) -> str:
    if not d.rows:
        return ""
    rows = "".join(
        f'<tr class="{"culprit" if r.culprit else "proc"}"><td>{MARKER if r.culprit else ""}</td>'
        f"<td>{_e(r.label)}</td><td>{_e(r.node_ip or '-')}</td>"
        f"<td>{'-' if r.pid is None else r.pid}</td><td><code>{_e(r.stage.value)}</code></td>"
        f"<td>{_e(r.state)}</td></tr>"
        for r in d.rows
    )
    return (
        '<section id="processes"><h2>Processes</h2><table><thead><tr><th></th><th>process</th>'
        "<th>node</th><th>pid</th><th>stage</th><th>state</th></tr></thead>"
        f"<tbody>{rows}</tbody></table></section>"
    )


def _stack(d: Diagnosis) -> str:
    x = d.excerpt
    if x is None:
        return ""
    frames = "".join(
        f'<div class="frame{" deciding" if i in x.highlight else ""}">'
        f"{MARKER if i in x.highlight else '&nbsp;'} {_e(frame)}</div>"
        for i, frame in enumerate(x.frames)
    )
    note = f"<p>{MARKER} marks the frames that decided the verdict.</p>" if x.highlight else ""
    return (
        f'<section id="stack"><h2>Stack of {_e(x.title)}, innermost first</h2>'
        f'<pre class="stack">{frames or "(no frames)"}</pre>{note}</section>'
    )


def _findings(v: Verdict) -> str:
    if not v.findings:
        return ""
    items = []
    for f in v.findings:
        evidence = (
            f"<details><summary>evidence ({len(f.evidence)})</summary>"
            f"<pre>{_e(chr(10).join(f.evidence))}</pre></details>"
            if f.evidence
            else ""
        )
        items.append(
            f'<li class="finding"><span class="sev-{_e(f.severity.value)}">'
            f"{_e(f.severity.value.upper())}</span> {_e(f.message)} "
            f"<code>{_e(f.rule)}</code>{_by(f.by)}{evidence}</li>"
        )
    return f'<section id="findings"><h2>Findings</h2><ul>{"".join(items)}</ul></section>'


def _summary_by(v: Verdict) -> str | None:
    """The rule that decided the summary (`extra.summary_by`, docs/verdict.md "Provenance")."""
    by = v.extra.get("summary_by")
    return by if isinstance(by, str) else None


def _by(*rules: str | None) -> str:
    """Provenance: the rules that made a culprit's reasons or a finding (docs/verdict.md)."""
    named = [r for r in dict.fromkeys(rules) if r]
    if not named:
        return ""
    return (
        f' <span class="by">by <code>{"</code>, <code>".join(_e(r) for r in named)}</code></span>'
    )


def _list_section(anchor: str, title: str, items: tuple[str, ...], start: int | None = None) -> str:
    """A list section; `start`: an ordered list numbered from it (`<ol start=4>`)."""
    if not items:
        return ""
    tag = "ul" if start is None else "ol"
    opening = tag if start in (None, 1) else f'ol start="{start}"'
    body = "".join(f"<li>{_e(item)}</li>" for item in items)
    return f'<section id="{anchor}"><h2>{_e(title)}</h2><{opening}>{body}</{tag}></section>'


def _raw(d: Diagnosis) -> str:
    """The JSON report, indented where it is small, compact where it is not, left out (with a
    note) past RAW_MAX: a large job's page stays under 2 MiB. Escaped as element text."""
    doc = report_json(d)
    text = json.dumps(doc, separators=(",", ":"), ensure_ascii=False)
    if len(text) * 2 <= RAW_INDENTED_MAX:  # indented, a report is about 1.3 times as long
        text = json.dumps(doc, indent=2, ensure_ascii=False)
    size = len(text.encode("utf-8"))
    if size > RAW_MAX:
        return (
            '<section id="raw-evidence"><h2>Raw evidence</h2><p class="note">The report as JSON '
            f"is {size / 2**20:.1f} MiB, more than this page keeps ({RAW_MAX / 2**20:.0f} MiB): "
            "<code>--format json</code> writes it (the evidence bundle has everything).</p>"
            "</section>"
        )
    return (
        '<section id="raw-evidence"><h2>Raw evidence</h2>'
        "<details><summary>The report as JSON (<code>--format json</code>)</summary>"
        f"<pre>{html.escape(text, quote=False)}</pre></details></section>"
    )
