"""The demo job carries slime main's layout (issue 24 item 2), so that py-spy frames of a demo run
are the frames of a real slime main job.

tests/fixtures/demo_layout/slime-2026-{01,08}.json are the functions of the real slime files the
demo mirrors, at the January 2026 commit and at main (624b824), extracted from the real tree by
scripts/extract_demo_layout.py (provenance: tests/fixtures/README.md)."""

from __future__ import annotations

import json
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEMO_JOB = ROOT / "demo" / "slime_hangdoctor_demo" / "job"
FIXTURES = ROOT / "tests" / "fixtures" / "demo_layout"

sys.path.insert(0, str(ROOT / "scripts"))
from extract_demo_layout import qualnames  # noqa: E402

# The call paths of slime main that the demo job runs, at their real paths (issue 24 item 2):
# server groups behind the router, the per-group health monitor paused/resumed around offload and
# weight updates, server_control's abort-until-idle, and the disk weight sync.
MAIN_PATHS: tuple[tuple[str, str], ...] = (
    ("slime/ray/rollout.py", "start_rollout_servers"),
    ("slime/ray/rollout.py", "_start_router"),
    ("slime/ray/rollout.py", "ServerGroup.start_engines"),
    ("slime/ray/rollout.py", "ServerGroup.offload"),
    ("slime/ray/rollout.py", "ServerGroup.onload"),
    ("slime/ray/rollout.py", "RolloutServer.recover"),
    ("slime/ray/rollout.py", "RolloutServer.offload"),
    ("slime/ray/rollout.py", "RolloutServer.onload_weights"),
    ("slime/ray/rollout.py", "RolloutServer.onload_kv"),
    ("slime/ray/rollout.py", "RolloutManager.get_updatable_engines_and_lock"),
    ("slime/ray/rollout.py", "RolloutManager.clear_updatable_num_new_engines"),
    ("slime/ray/rollout.py", "RolloutManager.recover_updatable_engines"),
    ("slime/ray/rollout.py", "RolloutManager.health_monitoring_pause"),
    ("slime/ray/rollout.py", "RolloutManager.health_monitoring_resume"),
    ("slime/utils/health_monitor.py", "RolloutHealthMonitor._health_monitor_loop"),
    ("slime/utils/health_monitor.py", "RolloutHealthMonitor._run_health_checks"),
    ("slime/utils/health_monitor.py", "RolloutHealthMonitor._check_engine_health"),
    ("slime/utils/health_monitor.py", "RolloutHealthMonitor._kill_engine"),
    ("slime/backends/sglang_utils/server_control.py", "abort_servers_until_idle"),
    ("slime/backends/sglang_utils/server_control.py", "abort_server_until_idle"),
    ("slime/backends/sglang_utils/server_control.py", "_get_server_num_requests"),
    ("slime/backends/sglang_utils/server_control.py", "_abort_server_once"),
    ("slime/rollout/sglang_rollout.py", "abort"),
    ("slime/backends/megatron_utils/actor.py", "MegatronTrainRayActor.update_weights"),
    (
        "slime/backends/megatron_utils/update_weight/update_weight_from_disk.py",
        "UpdateWeightFromDisk.update_weights",
    ),
    ("slime/backends/megatron_utils/hf_checkpoint_saver.py", "save_hf_model_to_path"),
    ("slime/ray/actor_group.py", "RayTrainGroup._reload_rollout_weights_from_disk"),
    ("slime/backends/sglang_utils/sglang_engine.py", "SGLangEngine.update_weights_from_disk"),
    ("slime/backends/sglang_utils/sglang_engine.py", "SGLangEngine.health_generate"),
)

# Functions of the January layout that slime main no longer has, which the demo still defines,
# each with the reason it stays.
KEPT_FROM_JANUARY: dict[tuple[str, str], str] = {
    **{
        ("slime/backends/fsdp_utils/actor.py", q): "train_custom_loss_stuck and "
        "train_fsdp_microbatch_diverged run slime's FSDP backend, gone from slime main (miles "
        "keeps FSDPTrainRayActor)"
        for q in (
            "FSDPTrainRayActor.train",
            "FSDPTrainRayActor._packed_data",
            "FSDPTrainRayActor._train_core",
            "FSDPTrainRayActor._train_step",
        )
    },
    ("slime/ray/actor_group.py", "RayTrainGroup.async_init"): "the train group's start is not "
    "main's RayTrainGroup.create yet (issue 24 item 2 names the rollout side)",
}


@cache
def tree(name: str) -> dict[str, list[str]]:
    files: dict[str, list[str]] = json.loads((FIXTURES / f"{name}.json").read_text())["files"]
    return files


@cache
def demo(rel: str) -> frozenset[str]:
    path = DEMO_JOB / rel
    return frozenset(qualnames(path.read_text())) if path.is_file() else frozenset()


@pytest.mark.parametrize(("rel", "qual"), MAIN_PATHS, ids=[f"{r}:{q}" for r, q in MAIN_PATHS])
def test_demo_runs_slime_mains_function_at_its_real_path(rel: str, qual: str) -> None:
    assert qual in tree("slime-2026-08").get(rel, []), f"{rel}:{qual} is not in slime main"
    assert qual in demo(rel), f"the demo job has no {qual} in {rel}"


def _demo_files() -> list[str]:
    return sorted(p.relative_to(DEMO_JOB).as_posix() for p in DEMO_JOB.rglob("*.py"))


@pytest.mark.parametrize("rel", _demo_files())
def test_demo_defines_nothing_slime_main_retired(rel: str) -> None:
    """A function of the January layout that main dropped (init_rollout_engines,
    clear_num_new_engines, ...) would put a January frame on a slime-main demo's stack."""
    jan, main = tree("slime-2026-01").get(rel, []), set(tree("slime-2026-08").get(rel, []))
    retired = sorted(
        q for q in demo(rel) if q in jan and q not in main and (rel, q) not in KEPT_FROM_JANUARY
    )
    assert not retired, f"{rel} defines what slime main retired: {retired}"
