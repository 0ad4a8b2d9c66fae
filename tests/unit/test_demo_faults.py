"""The demo's fault registry is consistent with the verdict contract and with the demo job
(the job is imported in a subprocess: its top-level package is `slime`, as in a real job)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from slime_hangdoctor.verdict import Role, Stage, Status
from slime_hangdoctor_demo.faults import FAULTS, get_fault, server_fault_supported
from slime_hangdoctor_demo.launch import JOB_DIR, job_entrypoint

REQUIRED = {
    "none",
    "slow",
    "startup_engine_never_healthy",
    "rollout_engine_stuck",
    "reward_hang",
    "offload_hang",
    "train_rank_stuck",
    "colocate_update_hang",
    "weight_sync_engine_missing",
    "eval_hang",
}

_PROBE = """
import json, sys
from slime.utils.arguments import parse_args
from slime.utils.misc import fault_armed
from slime.backends.sglang_utils.sglang_engine import SERVER_FAULTS, TIMED_SERVER_FAULTS
out = {"server_faults": SERVER_FAULTS, "timed": sorted(TIMED_SERVER_FAULTS), "args": {}}
for fault in sys.argv[1:]:
    a = parse_args(["--fault", fault, "--fault-after-steps", "2"])
    out["args"][fault] = {
        "colocate": a.colocate, "eval_interval": a.eval_interval, "num_engines": a.num_engines,
        "armed": [fault_armed(a, fault, i) for i in range(4)],
        "reward_hang_armed": [fault_armed(a, "reward_hang", i) for i in range(4)],
        "router": [a.sglang_router_ip, a.sglang_router_port, a.router_policy, a.router_log_level],
    }
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def job_view() -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, *FAULTS],
        cwd=JOB_DIR,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    view: dict[str, object] = json.loads(proc.stdout)
    return view


def test_every_required_fault_is_registered() -> None:
    assert set(FAULTS) >= REQUIRED


@pytest.mark.parametrize("name", sorted(FAULTS))
def test_expected_verdict_uses_contract_values(name: str) -> None:
    spec = get_fault(name)
    status = Status(spec.expected.status)
    stage = Stage(spec.expected.stage)
    if status is Status.HUNG:
        assert stage not in (Stage.NONE, Stage.UNKNOWN)
        if spec.expected.no_culprit:  # every rank waits alike: no process stands out
            assert spec.expected.culprit_role is None and spec.frames
            return
        assert spec.expected.culprit_role is not None
        role = Role(spec.expected.culprit_role)
        if role is Role.TRAIN_RANK:
            assert spec.expected.culprit_rank is not None
        if role is Role.SGLANG_ENGINE:
            assert (spec.expected.culprit_engine is None) != (not spec.expected.culprit_engines)
        assert spec.frames, "a hang names the frames that show it"
    else:
        assert stage is Stage.NONE
        assert spec.expected.culprit_role is None


def test_unknown_fault_is_refused() -> None:
    with pytest.raises(ValueError, match="known:"):
        get_fault("no_such_fault")


def test_job_maps_each_server_fault_as_the_registry_says(job_view: dict[str, object]) -> None:
    server_faults = job_view["server_faults"]
    assert isinstance(server_faults, dict)
    for name, spec in FAULTS.items():
        assert server_faults.get(name) == spec.server_fault, name


def test_job_configuration_follows_the_fault(job_view: dict[str, object]) -> None:
    args = job_view["args"]
    assert isinstance(args, dict)
    for name, spec in FAULTS.items():
        assert args[name]["colocate"] is spec.colocate, name
        assert args[name]["num_engines"] == 2
    assert args["eval_hang"]["eval_interval"] == 1
    assert args["none"]["reward_hang_armed"] == [False] * 4
    assert args["reward_hang"]["armed"] == [False, False, True, True]


def test_stuck_scheduler_goes_live_only_once_armed(job_view: dict[str, object]) -> None:
    """The router sends every engine its share of every rollout: a stuck decode step must wait
    for its arm file (created at the armed step), or the job would hang at its first rollout."""
    timed = job_view["timed"]
    assert isinstance(timed, list)
    assert "stuck_scheduler" in timed
    args = job_view["args"]
    assert isinstance(args, dict)
    assert args["rollout_engine_stuck"]["armed"] == [False, False, True, True]
    assert args["eval_hang"]["armed"] == [False, False, True, True]


def test_the_job_starts_its_own_router_with_slimes_defaults(job_view: dict[str, object]) -> None:
    """No --sglang-router-ip: the RolloutManager starts sgl-router, with RouterArgs' own policy
    and slime's quiet log level (slime/backends/sglang_utils/arguments.py:34-37)."""
    args = job_view["args"]
    assert isinstance(args, dict)
    for name in FAULTS:
        assert args[name]["router"] == [None, None, "cache_aware", "warn"], name


def test_server_fault_support_matches_the_standin() -> None:
    from slime_hangdoctor_demo.sglang_server import FAULTS as SERVER_FAULTS

    for spec in FAULTS.values():
        assert server_fault_supported(spec) is (
            spec.server_fault is None or spec.server_fault in SERVER_FAULTS
        )


def test_entrypoint_runs_the_job_driver() -> None:
    entry = job_entrypoint("reward_hang", 3, ["--sglang-request-log-dir", "/tmp/x y"])
    assert entry.split()[1:6] == ["train.py", "--fault", "reward_hang", "--fault-after-steps", "3"]
    assert "'/tmp/x y'" in entry
    assert (Path(JOB_DIR) / "train.py").is_file()
    assert (Path(JOB_DIR) / "slime" / "ray" / "rollout.py").is_file()


def test_tp_size_is_the_faults_own_unless_given_and_a_tp_fault_needs_two_ranks() -> None:
    from slime_hangdoctor_demo.launch import DemoError, tp_size_of

    assert tp_size_of(get_fault("rollout_engine_stuck"), None) == 1
    assert tp_size_of(get_fault("rollout_engine_stuck"), 4) == 4
    assert tp_size_of(get_fault("rollout_tp_ranks_diverged"), None) == 4
    assert tp_size_of(get_fault("startup_tp_rank_killed"), 4) == 4
    with pytest.raises(DemoError, match="needs --tp 2 or more"):
        tp_size_of(get_fault("rollout_tp_rank_killed"), 1)
    with pytest.raises(DemoError, match="at least 1"):
        tp_size_of(get_fault("none"), 0)
