"""The culprit is the process that holds (issue 42, item 2): where a role has several processes
(an engine: its Ray actor, HTTP server, schedulers, detokenizer), the culprit names the one whose
own state is the evidence, with the engine as its group, and the process table marks it.

On bundles recorded from the demo job (real Ray actors, real py-spy, the SGLang stand-in whose
scheduler blocks in `_block_forever` under `forward_decode`: demo/slime_hangdoctor_demo/, provenance
in tests/fixtures/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slime_hangdoctor.pipeline import analyse_bundle
from slime_hangdoctor.verdict import Diagnosis, Role

DEMO = Path(__file__).resolve().parents[1] / "fixtures" / "analysis" / "demo"


def _diagnosis(name: str) -> Diagnosis:
    return analyse_bundle(DEMO / f"{name}.tar.gz").diagnosis


def test_a_stuck_engine_names_its_scheduler_not_its_idle_http_server() -> None:
    d = _diagnosis("rollout_engine_stuck")
    c = d.verdict.culprits[0]
    assert c.role is Role.SGLANG_ENGINE
    assert c.pid == 2870 and c.process == "scheduler TP0", c  # _block_forever in forward_decode
    assert c.engine_url == "http://127.0.0.1:15010"  # the engine is its group
    assert "scheduler TP0 (pid 2870) of sglang engine http://127.0.0.1:15010" in d.verdict.summary
    marked = {r.pid for r in d.rows if r.culprit}
    assert marked == {2870}, marked  # the HTTP server 2827 ("event loop idle") is not marked
    assert d.excerpt is not None and "pid 2870" in d.excerpt.title


def test_the_wedged_tp_rank_is_the_culprit_of_its_engine() -> None:
    d = _diagnosis("rollout_tp_rank_prefetch_stuck")
    c = d.verdict.culprits[0]
    assert c.pid == 24238 and c.process == "scheduler TP0", c  # sglang::scheduler_TP0
    assert 24238 in {r.pid for r in d.rows if r.culprit}
    assert 24227 not in {r.pid for r in d.rows if r.culprit}  # its idle HTTP server


ENGINE_BUNDLES = sorted(p.name.removesuffix(".tar.gz") for p in DEMO.glob("*.tar.gz"))


@pytest.mark.parametrize("name", ENGINE_BUNDLES)
def test_every_engine_culprit_is_a_marked_process_whose_state_is_no_idle_loop(name: str) -> None:
    """The general rule on every recorded demo bundle: an engine culprit's pid is a process of
    that engine, marked in the table, and it is never an idle event loop while another process
    of the same engine is held in its work (a stage, a block that waits on nobody else)."""
    d = _diagnosis(name)
    for c in d.verdict.culprits:
        if c.role is not Role.SGLANG_ENGINE or c.pid is None:
            continue
        rows = {r.pid: r for r in d.rows}
        assert c.pid in rows and rows[c.pid].culprit, (name, c)
        group = [r for r in d.rows if r.engine_url == c.engine_url]
        held = [
            r for r in group if "_block_forever" in r.state or "blocked in collective" in r.state
        ]
        if held and "event loop idle" in rows[c.pid].state:
            pytest.fail(f"{name}: culprit pid {c.pid} idles while {held[0].label} holds")
