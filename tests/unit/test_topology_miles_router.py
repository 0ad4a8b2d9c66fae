"""miles's own router (`--use-miles-router`, issue 35 item 1) is the job's router: recorded from
real processes (tests/fixtures/real/miles-router/: a parent titled as Ray titles the RolloutManager
starts a multiprocessing *spawn* child, as miles's `start_router` does, radixark/miles 31f1ca961
miles/ray/rollout/router_manager.py:66-70, which titles itself `miles-router` as miles's
`run_router` does, miles/router/router.py:25, and serves HTTP). A spawn child keeps neither the
actor's frames nor its Ray title, and runs no `sglang_router/` code: it is found as the
RolloutManager's listening child, by its own title anywhere, and by its code (`miles/router/`).

Each case is a bundle the product's BundleWriter writes from those captures
(`transforms.bundle_of_captures`), read by the real loader; the variants are named transforms of
the recorded scan (`scan_without`, `scan_row_as`)."""

from __future__ import annotations

import json
from pathlib import Path

from slime_hangdoctor.bundle import open_bundle
from slime_hangdoctor.load import load_snapshot
from slime_hangdoctor.parsers.processes import parse_processes
from slime_hangdoctor.parsers.pyspy import parse_pyspy_json
from slime_hangdoctor.topology import build_topology
from slime_hangdoctor.verdict import Role
from tests.fixtures import transforms as tf

HERE = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "miles-router"
PIDS = json.loads((HERE / "pids.json").read_text())
SCAN = (HERE / "processes.json").read_text()
DUMP = (HERE / "router.json").read_text()
ROWS = parse_processes(SCAN)
STACK = parse_pyspy_json(DUMP, pid=PIDS["router"])
URL = f"http://127.0.0.1:{PIDS['port']}"


def _routers(where: Path, scan: str, with_stack: bool = False) -> list[tuple[int, str | None]]:
    stacks = {PIDS["router"]: DUMP} if with_stack else {}
    with open_bundle(tf.bundle_of_captures(where, scan, stacks)) as opened:
        snap = load_snapshot(opened)
    return [(m.pid, m.engine_url) for m in build_topology(snap).by_role(Role.ROUTER)]


def _alone(**fields: object) -> str:
    """The scan without the RolloutManager, the router's row with `fields` (its parent gone)."""
    scan = tf.scan_without(SCAN, frozenset({PIDS["rollout_manager"]}))
    return tf.scan_row_as(scan, PIDS["router"], ppid=None, **fields)


def test_the_recording_is_a_spawned_router_with_its_own_title() -> None:
    rows = {r.pid: r for r in ROWS}
    router = rows[PIDS["router"]]
    assert router.ppid == PIDS["rollout_manager"] and router.title == "miles-router"
    assert rows[PIDS["rollout_manager"]].title == "ray::RolloutManager"
    files = [f.filename for t in STACK.threads for f in t.frames]
    assert any(f.endswith("miles/router/router.py") for f in files)
    assert not any("sglang_router/" in f for f in files)
    assert any(f.endswith("multiprocessing/spawn.py") for f in files)


def test_the_rollout_managers_spawned_router_is_the_router(tmp_path: Path) -> None:
    assert _routers(tmp_path / "b", SCAN) == [(PIDS["router"], URL)]


def test_the_router_is_known_by_its_title_without_its_parent(tmp_path: Path) -> None:
    assert _routers(tmp_path / "b", _alone()) == [(PIDS["router"], URL)]


def test_the_router_is_known_by_its_code_without_its_title_or_parent(tmp_path: Path) -> None:
    bare = _alone(cmdline=["python3"], name="python3")
    assert _routers(tmp_path / "bare", bare) == []
    assert _routers(tmp_path / "stacked", bare, with_stack=True) == [(PIDS["router"], URL)]
