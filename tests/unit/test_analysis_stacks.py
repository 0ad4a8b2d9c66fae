"""Per-process stack reading on real py-spy output (parsed by the real parser / loader), and thread
choice on recorded processes."""

from __future__ import annotations

from pathlib import Path

from slime_hangdoctor.analysis.readers.pyspy import ProcessRead, highlight, read_process
from slime_hangdoctor.analysis.signatures import Block
from slime_hangdoctor.parsers.pyspy import (
    ProcessStack,
    StackObs,
    parse_pyspy_json,
    parse_pyspy_text,
)
from slime_hangdoctor.verdict import Stage
from tests.fixtures import transforms as tf
from tests.unit.recorded_stacks import as_obs, demo, recorded_process

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
BCAST = REAL / "gpu-2xh200-nccl-broadcast-hang"
GLOO = REAL / "local-cpu-gloo-broadcast-hang"
RAY = REAL / "gpu-2xh200-ray-nccl-hang"


def _read(stack: ProcessStack) -> ProcessRead:
    read = read_process(StackObs("192.0.2.2", stack.pid, 0, stack))
    assert read is not None
    return read


def _json_sections(path: Path) -> dict[int, ProcessRead]:
    out: dict[int, ProcessRead] = {}
    for sec in tf.split_capture_sections(path.read_text()):
        if sec.kind == "pyspy" and (sec.rc in (None, 0)):
            out[sec.pid] = _read(parse_pyspy_json(sec.body, sec.pid))
    return out


def test_nccl_broadcast_hang_ranks() -> None:
    reads = _json_sections(BCAST / "run3_hang.pyspy.json.txt")
    waiting, missing = reads[571], reads[572]
    assert waiting.stage is Stage.NCCL_BROADCAST
    assert waiting.block is Block.CUDA_SYNC
    assert waiting.primary.stage_index == 1  # the caller, not the top frame `synchronize`
    assert highlight(waiting.primary) == (0, 1)
    assert "CUDA sync" in waiting.describe()
    assert missing.stage is None
    assert missing.block is Block.PARKED
    assert "never_join" in missing.describe()


def test_train_stuck_and_matmul_ranks() -> None:
    stuck = _json_sections(BCAST / "run3_train_stuck.pyspy.json.txt")
    assert (stuck[708].stage, stuck[708].block) == (Stage.TRAIN, Block.CUDA_SYNC)
    assert (stuck[709].stage, stuck[709].block) == (Stage.TRAIN, Block.PARKED)
    matmul = _json_sections(BCAST / "run3_matmul.pyspy.json.txt")
    assert matmul[840].block is Block.CUDA_SYNC and matmul[840].stage is None


def test_gloo_collective_python_and_native() -> None:
    plain = _read(parse_pyspy_json((GLOO / "json0.txt").read_text()))
    assert plain.block is Block.COLLECTIVE
    assert plain.primary.block_frame is not None
    assert plain.primary.block_frame.name == "broadcast"
    (native,) = parse_pyspy_text((GLOO / "native0.txt").read_text())
    nread = _read(native)
    assert nread.block is Block.COLLECTIVE
    frame = nread.primary.block_frame
    assert frame is not None and frame.native and "c10d::Work::wait" in frame.name
    (peer,) = parse_pyspy_text((GLOO / "plain1.txt").read_text())
    assert _read(peer).block is Block.PARKED


def test_ray_actors_and_driver_ignore_background_threads() -> None:
    reads = _json_sections(RAY / "hang" / "pyspy.txt")
    assert reads[3445].stage is Stage.NCCL_BROADCAST
    assert reads[3445].primary.name == "MainThread"
    assert reads[3446].stage is Stage.TRAIN  # process_rollout_data inside update_weights
    driver = reads[3349]
    assert driver.block is Block.RAY_GET
    assert driver.primary.name == "MainThread"


def test_dashboard_traceback_text_reads_like_pyspy() -> None:
    secs = {
        s.pid: s.body
        for s in tf.split_capture_sections((RAY / "hang" / "pyspy.txt").read_text())
        if s.kind == "traceback"
    }
    (stack,) = parse_pyspy_text(secs[3445])
    read = _read(stack)
    assert read.stage is Stage.NCCL_BROADCAST and read.block is Block.CUDA_SYNC


def test_rollout_manager_loop_thread_decides_when_it_works() -> None:
    """Recorded RolloutManagers in `generate`: demo fault reward_hang (pid 4581), whose asyncio loop
    thread runs sympy inside the reward, and engine_paused_by_update (pid 24105), whose loop idles."""
    busy = read_process(as_obs(4581, 0, *recorded_process(demo("reward_hang"), 4581).threads))
    assert busy is not None
    assert busy.primary.name == "Thread-1 (_start_loop)"
    assert (busy.stage, busy.block) == (Stage.REWARD, Block.CPU)
    idle = read_process(
        as_obs(24105, 0, *recorded_process(demo("engine_paused_by_update"), 24105).threads)
    )
    assert idle is not None
    assert idle.primary.main
    assert idle.stage is Stage.ROLLOUT_DISPATCH
    assert idle.loop is not None and idle.loop.block is Block.EVENT_LOOP
