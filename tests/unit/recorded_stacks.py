"""Stacks that real processes produced, for the unit tests of stack rules (issue 21): threads read
through the product's own loader / parser from the recorded demo bundles, the GPU fixture bundles,
the Gloo captures and tests/fixtures/real/stage-shapes/ (provenance: tests/fixtures/README.md).
Tests select a process by the pid the recording has and a thread by its recorded name; variants come
only from the named transformations in tests/fixtures/transforms/."""

from __future__ import annotations

import functools
from pathlib import Path

from slime_hangdoctor.bundle import open_bundle
from slime_hangdoctor.load import load_snapshot
from slime_hangdoctor.parsers.pyspy import (
    ALL_STACKS,
    ProcessStack,
    StackObs,
    ThreadStack,
    parse_pyspy_json,
    parse_pyspy_text,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
DEMO = FIXTURES / "analysis" / "demo"
DEMO_NATIVE = FIXTURES / "analysis" / "demo_native"
BUNDLES = FIXTURES / "bundles"
REAL = FIXTURES / "real"
SHAPES = REAL / "stage-shapes"
LAYOUT_SHAPES = REAL / "layout-shapes"
GLOO = REAL / "local-cpu-gloo-broadcast-hang"


def demo(name: str) -> Path:
    """The recorded demo bundle of fault `name` (plain py-spy)."""
    return DEMO / f"{name}.tar.gz"


@functools.lru_cache(maxsize=64)
def _stacks(bundle: Path) -> dict[tuple[int, int], ProcessStack]:
    with open_bundle(bundle) as opened:
        snapshot = load_snapshot(opened)
    return {(s.pid, s.sample): s.stack for s in snapshot.joined(ALL_STACKS)}


def recorded_process(bundle: Path, pid: int, sample: int = 0) -> ProcessStack:
    """Every thread of `pid` at `sample`, as the product's loader reads them from `bundle`."""
    return _stacks(bundle)[(pid, sample)]


def recorded_thread(
    bundle: Path, pid: int, thread: str = "MainThread", sample: int = 0
) -> ThreadStack:
    """Thread `thread` (its recorded name) of `pid` at `sample` in `bundle`."""
    stack = recorded_process(bundle, pid, sample)
    return next(t for t in stack.threads if t.name == thread)


@functools.lru_cache(maxsize=16)
def _dump(path: Path) -> ProcessStack:
    return parse_pyspy_json(path.read_text())


def shape_thread(label: str) -> ThreadStack:
    """The thread named `label` in stage-shapes/shapes.json (one `py-spy dump --json`)."""
    return next(t for t in _dump(SHAPES / "shapes.json").threads if t.name == label)


def layout_shape_thread(label: str) -> ThreadStack:
    """The thread named `label` in layout-shapes/shapes.json (slime main's and miles's shapes, one
    `py-spy dump --json`; see capture_layout_shapes.py)."""
    return next(t for t in _dump(LAYOUT_SHAPES / "shapes.json").threads if t.name == label)


def gloo_rank(world: str, rank: int, native: bool = False) -> ThreadStack:
    """The main thread of rank `rank` of one of stage-shapes' real Gloo worlds (`ckpt`, `tp`,
    `whiten`, `cp`; see capture_stage_shapes.py), plain or `--native`."""
    name = f"{world}_rank{rank}{'.native' if native else ''}.json"
    return next(t for t in _dump(SHAPES / name).threads if t.name == "MainThread")


def checkpoint_rank(rank: int, native: bool = False) -> ThreadStack:
    """Checkpoint rank 0 or 1: in torch's real gather_object under Megatron's
    save_state_dict_async_plan, waiting for rank 2, which never enters the save."""
    return gloo_rank("ckpt", rank, native)


def tp_scheduler(rank: int, native: bool = False) -> ThreadStack:
    """TP scheduler `rank` (0-3) of a colocated tensor update: ranks 0-2 in the real Gloo barrier
    after update_weights_from_tensor, rank 3 still inside the update (parked where the GPU case
    blocks in CUDA IPC)."""
    return gloo_rank("tp", rank, native)


def gloo_dump(name: str) -> ProcessStack:
    """A local-cpu-gloo-broadcast-hang dump: json0.txt / json_native0.txt (JSON), native0.txt /
    plain1.txt (text)."""
    text = (GLOO / name).read_text()
    if name.startswith("json"):
        return parse_pyspy_json(text)
    (stack,) = parse_pyspy_text(text)
    return stack


def as_obs(pid: int, sample: int, *threads: ThreadStack, node: str = "10.0.0.1") -> StackObs:
    """Recorded threads as one process's stack observation at `sample` (the pid the test's
    topology gives that process; the threads keep their recorded frames, names and flags)."""
    return StackObs(node, pid, sample, ProcessStack(pid, tuple(threads)))
