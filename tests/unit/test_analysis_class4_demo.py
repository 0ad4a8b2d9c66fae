"""Issue 16 class 4 on recorded demo bundles (tests/fixtures/analysis/demo, provenance in
tests/fixtures/README.md): "the rollout waits on I/O and no engine has a request" is decided by the
evidence that says where the requests are, and each bundle's verdict goes wrong without it.

- `rollout_behind_proxy` (slime#1026): the RolloutManager's environment sends its requests to a
  proxy that never answers. The environment source (allow-listed proxy variables of the
  processes artefacts) names it; without it (`transforms.bundle_without_env`) nobody is blamed.
- `rollout_slots_leaked`: the rollout's concurrency slots leaked, no request leaves the
  RolloutManager. Its task history (generate far longer than its earlier runs) and its sockets (no
  connection to any engine) blame it; without the history (`transforms.bundle_without_targets`)
  nobody is blamed.
"""

from __future__ import annotations

from pathlib import Path

from slime_hangdoctor.parsers.kernel import KERNEL
from slime_hangdoctor.parsers.processes import PROXY_ENV
from slime_hangdoctor.parsers.ray_state import RAY_DASHBOARD
from slime_hangdoctor.parsers.sockets import SOCKETS
from slime_hangdoctor.verdict import Finding, Role, Stage, Status, Verdict
from tests.fixtures import transforms as tf
from tests.unit.demo_bundles import diagnosed, unpacked


def _verdict(path: Path) -> Verdict:
    return diagnosed(path).verdict


def _finding(v: Verdict, rule: str) -> Finding | None:
    return next((f for f in v.findings if f.rule == rule), None)


# --------------------------------------------------------------------------- rollout_behind_proxy


def test_requests_sent_to_a_proxy_are_the_proxys_cause(tmp_path: Path) -> None:
    v = _verdict(unpacked("rollout_behind_proxy", tmp_path))
    assert (v.status, v.stage) == (Status.HUNG, Stage.ROLLOUT_DISPATCH), v.summary
    assert [c.role for c in v.culprits] == [Role.ROLLOUT_MANAGER], v.summary
    culprit = _finding(v, "culprit")
    assert culprit is not None and "environ" in culprit.message
    assert any(e.startswith("[environ]") and "http_proxy" in e for e in culprit.evidence)
    cause = _finding(v, "requests-at-proxy")
    assert cause is not None, [f.rule for f in v.findings]
    # the sockets source shows the RolloutManager's connections held at the proxy
    assert any("connection(s) to the proxy" in e for e in cause.evidence), cause.evidence
    assert _finding(v, "proxy-on-job-endpoints") is not None
    assert any("no_proxy" in s for s in v.step_texts)
    assert _finding(v, "requests-held-outside-scheduler") is None  # no engine holds them


def test_without_the_environment_the_proxy_case_blames_nobody(tmp_path: Path) -> None:
    """The same bundle without the proxy variables: an idle loop and idle engines are not a
    culprit by themselves (and the RolloutManager's first rollout has no history to compare)."""
    root = unpacked("rollout_behind_proxy", tmp_path / "src")
    without = tf.bundle_without_env(root, tmp_path / "without", PROXY_ENV)
    v = _verdict(without)
    assert v.status is Status.HUNG, v.summary
    assert v.culprits == (), v.summary
    assert _finding(v, "requests-at-proxy") is None
    kept = tf.bundle_without_sources(root, tmp_path / "kept", frozenset({KERNEL}))
    assert [c.role for c in _verdict(kept).culprits] == [Role.ROLLOUT_MANAGER]  # not that source


# --------------------------------------------------------------------------- rollout_slots_leaked


def test_a_rollout_manager_whose_requests_never_left_it_is_blamed_on_its_evidence(
    tmp_path: Path,
) -> None:
    v = _verdict(unpacked("rollout_slots_leaked", tmp_path))
    assert (v.status, v.stage) == (Status.HUNG, Stage.ROLLOUT_DISPATCH), v.summary
    assert [c.role for c in v.culprits] == [Role.ROLLOUT_MANAGER], v.summary
    culprit = _finding(v, "culprit")
    assert culprit is not None
    assert "ray_tasks" in culprit.message and "rollout" in culprit.message, culprit.message
    assert any(e.startswith("[ray_tasks]") and "generate for" in e for e in culprit.evidence)
    assert any(e.startswith("[sockets]") and "no connection" in e for e in culprit.evidence)
    assert _finding(v, "requests-at-proxy") is None


def test_without_the_task_history_the_rollout_manager_is_not_blamed(tmp_path: Path) -> None:
    root = unpacked("rollout_slots_leaked", tmp_path / "src")
    without = tf.bundle_without_targets(
        root, tmp_path / "without", RAY_DASHBOARD, ("tasks_",)
    )
    v = _verdict(without)
    assert v.status is Status.HUNG, v.summary
    assert v.culprits == (), v.summary


def test_without_the_sockets_the_rollout_finder_stays_silent(tmp_path: Path) -> None:
    """Held connections cannot be excluded: only the task history's own (weak) overlong-method
    suspect remains, and the culprit finding no longer cites the rollout finder."""
    root = unpacked("rollout_slots_leaked", tmp_path / "src")
    v = _verdict(
        tf.bundle_without_sources(root, tmp_path / "without", frozenset({SOCKETS}))
    )
    culprit = _finding(v, "culprit")
    assert culprit is None or not any(e.startswith("[rollout]") for e in culprit.evidence)
