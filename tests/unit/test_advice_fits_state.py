"""Next steps fit the state (issue 42, item 3), on recorded bundles (tests/fixtures; provenance in
tests/fixtures/README.md and tests/fixtures/bundles/README.md).

`gpu-h200-rank-killed-fr` was recorded on an H200 with NCCL RAS and the flight recorder armed:
train rank 1 (pid 3151) was SIGKILLed in a collective; Ray recorded its actor DEAD
(WORKER_DIED). A dead process gets its log, the exit cause Ray recorded, the kernel's lines and
the restart, never a py-spy of its pid; the summary says what happened."""

from __future__ import annotations

from pathlib import Path

import pytest

from slime_hangdoctor.pipeline import analyse_bundle
from slime_hangdoctor.render.labels import headline
from tests.unit.test_golden_verdicts import BUNDLES

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
KILLED = FIXTURES / "bundles" / "gpu-h200-rank-killed-fr"


def test_a_dead_rank_gets_its_log_exit_cause_kernel_lines_and_restart_never_a_dump() -> None:
    v = analyse_bundle(KILLED).diagnosis.verdict
    c = v.culprits[0]
    assert (c.rank, c.pid) == (1, 3151)
    assert "train rank 1 (pid 3151, GPU 0) died; the others wait for it" in v.summary
    assert c.dead and not any(o.dead for o in v.culprits[1:])
    assert headline(v) == "HUNG in train step: train rank 1 died"  # what happened, first
    commands = [s.command for s in v.next_steps if s.command]
    assert not any("py-spy" in cmd and "3151" in cmd for cmd in commands), commands
    assert f"ray logs actor --id {c.actor_id}" in commands
    assert f'ray list actors --detail --filter "actor_id={c.actor_id}"' in commands
    dmesg = next(s for s in v.next_steps if s.command and s.command.startswith("dmesg"))
    assert "Xid" in dmesg.command and "GPU 0" in dmesg.why and dmesg.host == "192.0.2.2"
    stop = next(s for s in v.next_steps if s.command and s.command.startswith("ray job stop"))
    assert stop.command == "ray job stop hd-gpu-rank-killed-1796001563"
    assert "--load" in stop.why and "last checkpoint" in stop.why
    # the exit cause is in the verdict itself, and the first steps are about the death
    assert any(f.rule == "ray_actor.death" for f in v.findings)
    assert v.next_steps[0].command == f"ray logs actor --id {c.actor_id}"


@pytest.mark.parametrize("name", sorted(BUNDLES))
def test_one_step_once_and_no_dump_of_a_dead_process(name: str) -> None:
    d = analyse_bundle(BUNDLES[name]).diagnosis
    steps = d.verdict.next_steps
    keys = [s.key for s in steps]
    assert len(set(keys)) == len(keys), [k for k in keys if keys.count(k) > 1]
    dead = {r.pid for r in d.rows if r.state.startswith("dead")}
    dead |= {c.pid for c in d.verdict.culprits if c.dead}
    for s in steps:
        if s.command and s.command.startswith("py-spy"):
            assert s.process not in dead, (name, s.text)


@pytest.mark.parametrize("name", sorted(BUNDLES))
def test_one_blind_spot_per_cause(name: str) -> None:
    """A probe that failed says why; the source's generic "not seen" line is not added beside
    it, and sources that failed alike at one target (NVML and GPM without a driver) are one."""
    a = analyse_bundle(BUNDLES[name])
    spots = a.diagnosis.verdict.blind_spots
    assert len(set(spots)) == len(spots)
    failed = (
        {r.source for r in a.manifest.probes if r.outcome.value != "ok"} if a.manifest else set()
    )
    if "nccl_ras" in failed:
        assert not any(s.startswith("no NCCL RAS answer") for s in spots), spots
    if "nvml" in failed:
        assert not any(s.startswith("no NVML readings") for s in spots), spots
    reasons = [s.partition(": ")[2] for s in spots if s.startswith(("nvml ", "gpm ", "nvml, gpm "))]
    assert len(reasons) == len(set(reasons)), spots


def test_nvml_and_gpm_failing_alike_are_one_blind_spot() -> None:
    spots = analyse_bundle(BUNDLES["demo-rollout_engine_stuck"]).diagnosis.verdict.blind_spots
    nvml = [s for s in spots if "NVML is not available" in s]
    assert len(nvml) == 1 and nvml[0].startswith("nvml, gpm gpus: unavailable: "), spots
    assert not any(s.startswith("no NCCL RAS answer") for s in spots), spots
