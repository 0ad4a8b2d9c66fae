"""Ray's states as typed literals (parsers/ray_state.py): the same values as the installed Ray's own, every one
read through from a real answer, a state a newer Ray adds read as UNKNOWN with its text, and a
misspelt state refused by mypy."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, get_args

import pytest
from ray._private import custom_types as ray_types  # where Ray 2.60 defines its state literals
from ray.job_submission import JobStatus as RayJobStatus

from slime_hangdoctor.parsers import ray_state
from slime_hangdoctor.parsers import ray_state as facts
from tests.fixtures import transforms as tf

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "tests" / "fixtures" / "real"
HANG = REAL / "gpu-2xh200-ray-nccl-hang" / "hang" / "dashboard.json"
QUEUES = REAL / "local-cpu-ray-2.60-actor-queues"
ROWS = ("data", "result", "result")

# (our literal, the installed Ray's values)
PAIRS: dict[str, tuple[Any, tuple[str, ...]]] = {
    "actor": (facts.ActorState, get_args(ray_types.TypeActorStatus)),
    "task": (facts.TaskState, get_args(ray_types.TypeTaskStatus)),
    "node": (facts.NodeState, get_args(ray_types.TypeNodeStatus)),
    "placement group": (facts.PlacementGroupState, get_args(ray_types.TypePlacementGroupStatus)),
    "job": (facts.JobStatus, tuple(s.value for s in RayJobStatus)),
}


def _hang(endpoint: str) -> str:
    body: str = json.loads(HANG.read_text(encoding="utf-8"))[endpoint]["body"]
    return body


# (parser, a real answer, the path to its first row's state, the field the fact keeps it in)
SOURCES: dict[str, tuple[Any, str, tuple[str | int, ...], str]] = {
    "actor": (
        ray_state.parse_actors,
        _hang("/api/v0/actors?detail=1&limit=1000"),
        (*ROWS, 0, "state"),
        "state",
    ),
    "task": (
        ray_state.parse_tasks,
        _hang(
            "/api/v0/tasks?detail=1&filter_keys=state&filter_predicates=%3D&filter_values=RUNNING"
        ),
        (*ROWS, 0, "state"),
        "state",
    ),
    "node": (ray_state.parse_nodes, _hang("/api/v0/nodes?detail=1"), (*ROWS, 0, "state"), "state"),
    "placement group": (
        ray_state.parse_placement_groups,
        (QUEUES / "placement_groups.json").read_text(encoding="utf-8"),
        (*ROWS, 0, "state"),
        "state",
    ),
    "job": (ray_state.parse_jobs, _hang("/api/jobs/"), (0, "status"), "status"),
}


@pytest.mark.parametrize("kind", list(PAIRS))
def test_our_literals_are_the_installed_rays(kind: str) -> None:
    """Drift guard: a Ray upgrade that adds, drops or renames a state fails here first."""
    ours, rays = PAIRS[kind]
    assert sorted(get_args(ours)) == sorted(rays), kind
    assert facts.UNKNOWN_STATE not in rays  # UNKNOWN can never be taken for one of Ray's


@pytest.mark.parametrize("kind", list(SOURCES))
def test_every_state_ray_sends_is_read_as_itself(kind: str) -> None:
    parse, body, path, field = SOURCES[kind]
    for value in get_args(PAIRS[kind][0]):
        first = parse(tf.set_json_path(body, path, value))[0]
        assert getattr(first, field) == value
        assert getattr(first, f"raw_{field}") is None


@pytest.mark.parametrize("kind", list(SOURCES))
def test_a_state_a_newer_ray_adds_is_unknown_with_its_text(kind: str) -> None:
    parse, body, path, field = SOURCES[kind]
    newer = "A_STATE_RAY_2_60_NEVER_SENDS"
    first = parse(tf.set_json_path(body, path, newer))[0]
    assert getattr(first, field) == facts.UNKNOWN_STATE
    assert getattr(first, f"raw_{field}") == newer
    # the real answer itself: every row one of Ray's states, no raw text kept
    assert all(getattr(row, f"raw_{field}") is None for row in parse(body))


@pytest.mark.parametrize("kind", ["actor", "task", "node", "placement group"])
def test_a_row_without_a_state_is_unknown_without_text(kind: str) -> None:
    parse, body, path, field = SOURCES[kind]
    first = parse(tf.set_json_path(body, path, None))[0]
    assert (getattr(first, field), getattr(first, f"raw_{field}")) == (facts.UNKNOWN_STATE, None)


def test_mypy_refuses_a_misspelt_state(tmp_path: Path) -> None:
    """What the literals are for: a comparison with a state Ray has not, or a set of states with a
    misspelt member, is a type error (mypy --strict has strict equality)."""
    code = (
        "from slime_hangdoctor.parsers.ray_state import ActorState, RayActor, RayJob\n"
        "def alive(a: RayActor) -> bool:\n"
        '    return a.state == "ALIVEE"\n'
        "def running(j: RayJob) -> bool:\n"
        '    return j.status == "RUNING"\n'
        'WAITING: frozenset[ActorState] = frozenset({"PENDING_CREATION", "PENDING"})\n'
        "def fine(a: RayActor) -> bool:\n"
        '    return a.state == "ALIVE"\n'
    )
    (tmp_path / "misspelt.py").write_text(code, encoding="utf-8")
    cmd = [sys.executable, "-m", "mypy", "--strict", "--config-file", "/dev/null"]
    cmd += ["--cache-dir", str(tmp_path / "cache"), "--follow-imports", "silent"]
    done = subprocess.run(
        [*cmd, str(tmp_path / "misspelt.py")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={"PATH": "/usr/bin:/bin", "MYPYPATH": str(ROOT)},
    )
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert [line.split(":")[1] for line in errors] == ["3", "5", "6"], done.stdout + done.stderr
