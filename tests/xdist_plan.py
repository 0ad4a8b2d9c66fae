"""How the whole suite spreads over the machine's CPUs (pytest-xdist), live phase first.

`python3 -m pytest` with no paths (the README's test command, CI's, and the fast subset's `-m`
selections) runs on one worker per CPU this process may use (at most MAX_WORKERS), when
pytest-xdist is installed (the `test` extra) and no `-n`/`--dist` was given; `-n 0` runs it in one
process, as does naming paths (`python3 -m pytest tests/unit/test_x.py`); `-n N` alone, with or
without paths, runs on N workers by the same plan.

The plan (`LiveFirstScheduling`, pytest-xdist's `loadscope` scheduler with three rules):
- the live tests (marker `live`, tests/live_pool.py) are one unit, on one worker, first, and
  until the last of them is done no other worker gets a test: the live pool's demo jobs keep the
  whole machine to themselves, as they did before (the pool already keeps a 2-core box busy);
- the other tests that start a Ray head (marker `ray`) are one unit, so they run one after
  another, on one worker;
- every other test module is a unit of its own (its module-scoped fixtures are made once),
  given to the workers as they free up.
So what runs two (or more) at a time is the CPU-bound rest, after the live phase.

Each worker writes which of its tests are in the live or the Ray unit to a folder the controller
made (GROUPS_KEY): the controller never collects, and pytest-xdist's own groups (`--dist
loadgroup`) rename node ids, which pytest 9 no longer lets a plugin do. The scheduler reads
pytest-xdist's internals (`workqueue`, `assigned_work`); the version range in pyproject.toml is
the one it was written against.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling

LIVE_GROUP = "live"  # the xdist_group of the live tests
RAY_GROUP = "ray"  # the xdist_group of the other tests that start a Ray head
# 1: the whole suite runs in one process by default. Two workers on a 2-core CI machine made
# timing-bounded tests fail in a fresh-clone run (the stand-in's blocked HTTP loop, the watch's
# driver per run, wrapped messages in long worker paths): `-n 2` runs this plan on request until
# those bounds hold under a second worker. (8 would be the most worth it: past that, collecting the
# suite once per worker costs more than it gains.)
MAX_WORKERS = 1
GROUPS_KEY = "hangdoctor_groups"  # workerinput key: the folder of each worker's groups
_PLANNED = pytest.StashKey[Path]()  # in the controller: the plan is on, with this groups folder


def cpus() -> int:
    """The CPUs this process may run on (its affinity: a container's or taskset's limit)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def choose(config: pytest.Config) -> None:
    """In the controller: spread the whole suite over the CPUs, when nothing else was asked."""
    if hasattr(config, "workerinput") or not config.pluginmanager.hasplugin("xdist"):
        return
    option = config.option
    if option.dist != "no" or option.tx:
        return  # the caller chose how to distribute
    if option.numprocesses is None:  # nothing asked: the whole suite on every CPU
        if option.collectonly or config.getoption("usepdb", False):
            return
        if config.args_source is not pytest.Config.ArgsSource.TESTPATHS:
            return  # paths named: a developer's run of a few modules, in one process
        workers = min(cpus(), MAX_WORKERS)
        if workers < 2:
            return
        option.numprocesses = workers
    if option.numprocesses != 0:  # `-n N` alone (or the choice above): this plan
        option.dist = "loadscope"
        config.stash[_PLANNED] = Path(tempfile.mkdtemp(prefix="hd-xdist-groups-"))


def _group(item: pytest.Item) -> str | None:
    if item.get_closest_marker("live") is not None:
        return LIVE_GROUP
    if item.get_closest_marker("ray") is not None:
        return RAY_GROUP
    return None


class LiveFirstScheduling(LoadScopeScheduling):  # type: ignore[misc]
    """`loadscope` with modules as units, the Ray tests as one, and the live unit first, alone."""

    def __init__(self, config: pytest.Config, log: Any, groups: Path) -> None:
        super().__init__(config, log)
        self._groups_dir = groups
        self._groups: dict[str, str] | None = None

    def _split_scope(self, nodeid: str) -> str:
        if self._groups is None:  # every worker has written its groups by now (it collected)
            self._groups = {}
            for path in sorted(self._groups_dir.glob("*.json")):
                self._groups.update(json.loads(path.read_text(encoding="utf-8")))
        return self._groups.get(nodeid) or nodeid.split("::", 1)[0]

    def _live_owner(self) -> Any:
        """The worker that holds the live unit while some of it is not done, else None; the
        string "queued" while no worker has taken it yet."""
        if LIVE_GROUP in self.workqueue:
            return "queued"
        for node, work in self.assigned_work.items():
            unit = work.get(LIVE_GROUP)
            if unit is not None and not all(unit.values()):
                return node
        return None

    def _assign_work_unit(self, node: Any) -> None:
        owner = self._live_owner()
        if owner == "queued":
            self.workqueue.move_to_end(LIVE_GROUP, last=False)  # the next unit taken is it
        elif owner is not None and owner is not node:
            return  # the live phase has the machine to itself
        super()._assign_work_unit(node)

    def _reschedule(self, node: Any) -> None:
        owner = self._live_owner()
        if owner is not None and owner != "queued" and owner is not node:
            return  # held: not even shut down while the live unit may yet come back here
        super()._reschedule(node)

    def mark_test_complete(self, node: Any, item_index: int, duration: float = 0) -> None:
        was_live = self._live_owner() is not None
        super().mark_test_complete(node, item_index, duration)
        if was_live and self._live_owner() is None:  # the live phase is over: the rest start
            for other in self.nodes:
                if other is not node:
                    self._reschedule(other)


class Plan:
    """The plan's hooks (registered by tests/conftest.py where pytest-xdist is installed)."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        """In a worker: which of its tests are in the live unit or the Ray unit."""
        workerinput = getattr(config, "workerinput", None)
        if workerinput is None or GROUPS_KEY not in workerinput:
            return
        groups = {item.nodeid: g for item in items if (g := _group(item)) is not None}
        out = Path(workerinput[GROUPS_KEY]) / f"{workerinput['workerid']}.json"
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(groups), encoding="utf-8")
        tmp.replace(out)

    def pytest_configure_node(self, node: Any) -> None:
        """In the controller, for each worker: where it writes its groups."""
        groups = node.config.stash.get(_PLANNED, None)
        if groups is not None:
            node.workerinput[GROUPS_KEY] = str(groups)

    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        groups = config.stash.get(_PLANNED, None)
        return None if groups is None else LiveFirstScheduling(config, log, groups)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        groups = config.stash.get(_PLANNED, None)
        if groups is not None:
            shutil.rmtree(groups, ignore_errors=True)
