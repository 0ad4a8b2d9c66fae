"""Ray rows: a worker waiting on another actor's result (`ray.get` / `ray.wait`), an idle worker
waiting for its next task, and Ray's plumbing frames (tracing, client-mode and auto-init hooks).
The Ray actor methods of slime's classes are slime's (slime.py, miles.py)."""

from __future__ import annotations

from slime_hangdoctor.analysis.signatures.common import Block, WaitSig, waits

WAITS: tuple[WaitSig, ...] = (
    *waits(Block.RAY_GET, "ray/_private/worker.py", "get get_objects wait"),
    WaitSig(Block.IDLE_WORKER, "main_loop", "ray/_private/worker.py"),
)

# plumbing around a call (decorators, tracing): never the answer to "where"
TRANSPARENT_FILES = (
    "ray/util/tracing/",
    "ray/_private/client_mode_hook.py",
    "ray/_private/auto_init_hook.py",
    "ray/_private/function_manager.py",
)
