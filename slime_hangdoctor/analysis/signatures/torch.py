"""torch rows: process-group creation, distributed checkpoint (DCP), the c10d collectives, CUDA
sync points, their native frames under py-spy --native, and torch's plumbing frames."""

from __future__ import annotations

from slime_hangdoctor.analysis.signatures.common import (
    ANY,
    Block,
    FrameSig,
    WaitSig,
    native_waits,
    waits,
)
from slime_hangdoctor.verdict import Stage

C10D = "torch/distributed/distributed_c10d.py"

CHECKPOINT_FRAMES: tuple[FrameSig, ...] = (
    FrameSig(
        ANY, Stage.CHECKPOINT, "torch/distributed/checkpoint/", what="torch distributed checkpoint"
    ),
)

# group creation is startup unless an outer frame says otherwise
GROUP_FRAMES: tuple[FrameSig, ...] = (
    *(
        FrameSig(f, Stage.STARTUP, "torch/distributed/distributed_c10d.py", generic=True)
        for f in ("init_process_group", "new_group", "_new_group_with_tag")
    ),
)

# FSDP2 (`fully_shard`): the parameters' all-gather runs in the forward pre-hooks and the
# gradients' reduce-scatter in the backward post-hooks (_fully_shard/_fsdp_param_group.py unshard,
# post_backward; _fsdp_collectives.py foreach_all_gather, foreach_reduce at torch 2.13.0). Under
# the train step the outer frame decides; a backward hook run on autograd's device thread has no
# outer frame of the job: that thread is training.
FSDP_FRAMES: tuple[FrameSig, ...] = (
    FrameSig(
        ANY,
        Stage.TRAIN,
        "torch/distributed/fsdp/",
        what="FSDP all-gather / reduce-scatter",
        generic=True,
    ),
)

RENDEZVOUS_WAITS: tuple[WaitSig, ...] = (
    *waits(
        Block.RENDEZVOUS,
        C10D,
        "init_process_group new_group _new_group_with_tag _store_based_barrier "
        "_create_process_group_wrapper",
    ),
    WaitSig(Block.RENDEZVOUS, ANY, "torch/distributed/rendezvous.py"),
)
COLLECTIVE_WAITS: tuple[WaitSig, ...] = (WaitSig(Block.COLLECTIVE, ANY, C10D),)
CUDA_WAITS: tuple[WaitSig, ...] = (
    *waits(Block.CUDA_SYNC, "torch/cuda/__init__.py", "synchronize"),
    *waits(Block.CUDA_SYNC, "torch/cuda/streams.py", "synchronize wait_event query"),
)
NATIVE_WAITS: tuple[WaitSig, ...] = (
    *native_waits(
        Block.COLLECTIVE,
        "c10d::Work::wait WorkNCCL::wait WorkNCCL::synchronize ncclGroupEnd ncclBroadcast "
        "ncclAllReduce ncclAllGather ncclReduceScatter ncclSend ncclRecv gloo::",
    ),
    *native_waits(Block.RENDEZVOUS, "ncclCommInitRank TCPStore::wait TCPStore::get"),
    *native_waits(
        Block.CUDA_SYNC,
        "cudaDeviceSynchronize cuCtxSynchronize cudaStreamSynchronize cuStreamSynchronize "
        "cudaEventSynchronize cuEventSynchronize cudaMemcpy cuMemcpyDtoH",
    ),
)

# plumbing around a call (decorators, logging wrappers): never the answer to "where"
TRANSPARENT_FILES = ("torch/distributed/c10d_logger.py", "torch/utils/_contextlib.py")

# What a communication frame is: a native frame whose name holds one of COMM_NATIVE_PARTS (NCCL,
# c10d, gloo, a ProcessGroup; compared lower-case), or a Python frame under torch.distributed.
COMM_NATIVE_PARTS = ("nccl", "c10d::", "gloo::", "processgroup")
DISTRIBUTED_DIR = "torch/distributed/"

# The communication layers a collective is issued through (`lookup.COMM_LAYERS`): every function
# of torch.distributed (c10d, its object collectives, the differentiable ones of
# torch/distributed/nn/): the frame above them is the code that issued the collective.
COMM_LAYERS: tuple[tuple[str, str], ...] = ((ANY, DISTRIBUTED_DIR),)
