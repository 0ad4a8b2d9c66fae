"""Megatron-LM and Megatron-Bridge rows: the library code slime's train actors run (pipeline,
optimizer, DDP, checkpointing, the HF export of the bridge). Generic rows yield to slime's outer
frames: megatron core runs in training and in weight export alike."""

from __future__ import annotations

from slime_hangdoctor.analysis.signatures.common import ANY, Block, FrameSig, WaitSig, rows
from slime_hangdoctor.verdict import Stage

TRAIN_FRAMES: tuple[FrameSig, ...] = (
    FrameSig(ANY, Stage.TRAIN, "megatron/core/pipeline_parallel/", what="megatron", generic=True),
    FrameSig(ANY, Stage.TRAIN, "megatron/core/optimizer/", what="optimizer", generic=True),
    FrameSig(ANY, Stage.TRAIN, "megatron/core/distributed/", what="megatron DDP", generic=True),
    FrameSig(ANY, Stage.STARTUP, "megatron/training/initialize.py", what="megatron init"),
    FrameSig(
        "initialize_model_parallel", Stage.STARTUP, "megatron/core/parallel_state.py", generic=True
    ),
)

# py-spy may print Megatron paths relative to the megatron/ folder (`core/dist_checkpointing/...`,
# `training/checkpointing.py`, as in slime#1908), so the patterns leave out the leading `megatron/`.
CHECKPOINT_FRAMES: tuple[FrameSig, ...] = (
    FrameSig(ANY, Stage.CHECKPOINT, "training/checkpointing.py", what="Megatron checkpointing"),
    *rows(
        Stage.CHECKPOINT,
        "training/async_utils.py",
        "maybe_finalize_async_save schedule_async_save",
        what="Megatron async checkpoint save",
    ),
    FrameSig(ANY, Stage.CHECKPOINT, "dist_checkpointing/", what="Megatron dist_checkpointing"),
)

BRIDGE_FRAMES: tuple[FrameSig, ...] = (
    FrameSig(
        ANY, Stage.WEIGHT_SYNC, "megatron/bridge/", what="megatron-bridge export", generic=True
    ),
)

# a pipeline stage's blocking p2p send / recv
COLLECTIVE_WAITS: tuple[WaitSig, ...] = (
    WaitSig(Block.COLLECTIVE, ANY, "megatron/core/pipeline_parallel/p2p_communication.py"),
)

# Megatron's process-group set-up (a communication frame, as torch.distributed's)
PARALLEL_STATE_PY = "megatron/core/parallel_state.py"

# Megatron's communication layers (`lookup.COMM_LAYERS`): the process groups (parallel_state),
# the pipeline's p2p send / recv and the tensor-parallel mappings' collectives
# (core_r0.14 megatron/core/tensor_parallel/mappings.py `_reduce`, `_gather_along_first_dim`, ...);
# without the leading `megatron/`, which py-spy may leave out (as CHECKPOINT_FRAMES's)
COMM_LAYERS: tuple[tuple[str, str], ...] = (
    (ANY, "core/parallel_state.py"),
    (ANY, "core/pipeline_parallel/p2p_communication.py"),
    (ANY, "core/tensor_parallel/mappings.py"),
)
