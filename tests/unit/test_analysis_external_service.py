"""Issue 21 item 3: a rollout that awaits a service outside the job. Recorded from the live demo
fault `reward_service_stuck` (tests/fixtures/analysis/demo/reward_service_stuck.tar.gz): the
rewards come from a remote reward model (`--rm-type remote_rm --rm-url`, slime's remote_rm) that
answered the first rollout and then accepts and never answers. Every stack is idle, the engines
hold nothing; only the RolloutManager's connections to the service show where the rollout waits."""

from __future__ import annotations

from pathlib import Path

import pytest

from slime_hangdoctor.analysis.services import ServiceKind, job_services, kind_of
from slime_hangdoctor.analysis.world import build_world
from slime_hangdoctor.pipeline import analyse_bundle
from slime_hangdoctor.verdict import Role, Stage, Status
from tests.fixtures.transforms import bundle_without_sources
from tests.unit.demo_bundles import DEMO, diagnosed, unpacked

NAME = "reward_service_stuck"


def test_the_peer_is_named_from_the_job_and_the_stage_is_what_the_rollout_waits_for() -> None:
    v = diagnosed(DEMO / f"{NAME}.tar.gz").verdict
    assert (v.status, v.stage) == (Status.HUNG, Stage.REWARD)
    assert [c.role for c in v.culprits] == [Role.ROLLOUT_MANAGER]
    cause = next(f for f in v.findings if f.rule == "requests-at-external-service")
    assert "reward model http://127.0.0.1:58217/score" in cause.message
    assert "--rm-url on the driver's command line" in cause.message
    assert any(e.startswith("[sockets]") and "8 connection(s)" in e for e in cause.evidence)
    assert not any(f.rule == "requests-held-outside-scheduler" for f in v.findings)


def test_without_the_sockets_nothing_names_the_service(tmp_path: Path) -> None:
    """The connections are the only evidence: without them the service is not blamed and the
    stage is not the reward."""
    src = unpacked(NAME, tmp_path / "src")
    v = diagnosed(bundle_without_sources(src, tmp_path / "nosockets", frozenset({"sockets"})))
    assert not any(f.rule == "requests-at-external-service" for f in v.verdict.findings)
    assert v.verdict.stage is not Stage.REWARD


def test_job_services_reads_the_driver_command_line() -> None:
    a = analyse_bundle(DEMO / f"{NAME}.tar.gz")
    services = job_services(build_world(a.snapshot, a.topology))
    (rm,) = [s for s in services if s.port == 58217]
    assert rm.kind is ServiceKind.REWARD and rm.stage is Stage.REWARD
    assert rm.named_by.startswith("--rm-url on the driver's command line")


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("--rm-url", ServiceKind.REWARD),
        ("--reward-server-url", ServiceKind.REWARD),
        ("LLM_JUDGE_URL", ServiceKind.REWARD),
        ("--sandbox-url", ServiceKind.TOOLS),
        ("--code-exec-endpoint", ServiceKind.TOOLS),
        ("--sglang-router-url", ServiceKind.ENGINE),
        ("--wandb-host", ServiceKind.OTHER),
    ],
)
def test_what_a_flag_name_says_the_service_is(name: str, kind: ServiceKind) -> None:
    assert kind_of(name) is kind
