"""Stage and wait signatures: DATA tables that map stack frames and Ray methods onto a stage.

One module per framework holds its rows and the names of its frames that the code compares:
`slime` (one `Layout` per slime source layout), `miles`, `sglang`, `megatron`, `torch`, `ray` and
`python` (the standard library and I/O libraries); `common` is the matching machinery (the row
types, `Block`, how a row matches a frame) and `lookup` assembles the tables and answers what a
frame is. A new slime release is a new `Layout` entry (or a few rows in an existing one): no code
change. No module outside this package writes a frame's name (tests/unit/test_frame_names.py).

`WAITS` tells what a thread is blocked on, from library frames (torch.distributed, ray.get, requests,
selectors, ...) and, when py-spy ran with --native, native frames (cudaDeviceSynchronize, c10d::Work::wait).
"""

from __future__ import annotations

from slime_hangdoctor.analysis.signatures.common import (
    ANY,
    COLLECTIVE_BLOCKS,
    WAITING_BLOCKS,
    Block,
    FrameSig,
    Layout,
    MethodSig,
    WaitSig,
    file_matches,
    norm_path,
    sig_matches,
    split_name,
)
from slime_hangdoctor.analysis.signatures.lookup import (
    ALL_FRAME_SIGS,
    COMM_LAYERS,
    INTAKE_CALLERS,
    INTAKE_VIA,
    LAYOUT_HINT_FILES,
    LAYOUTS,
    TRANSPARENT_FILES,
    WAITS,
    is_comm_layer,
    is_intake_caller,
    is_intake_via,
    is_transparent,
    layout_hint,
    layouts_of,
    match_frame,
    method_stage,
    wait_of,
)

__all__ = [
    "ALL_FRAME_SIGS",
    "ANY",
    "COLLECTIVE_BLOCKS",
    "COMM_LAYERS",
    "INTAKE_CALLERS",
    "INTAKE_VIA",
    "LAYOUTS",
    "LAYOUT_HINT_FILES",
    "TRANSPARENT_FILES",
    "WAITING_BLOCKS",
    "WAITS",
    "Block",
    "FrameSig",
    "Layout",
    "MethodSig",
    "WaitSig",
    "file_matches",
    "is_comm_layer",
    "is_intake_caller",
    "is_intake_via",
    "is_transparent",
    "layout_hint",
    "layouts_of",
    "match_frame",
    "method_stage",
    "norm_path",
    "sig_matches",
    "split_name",
    "wait_of",
]
