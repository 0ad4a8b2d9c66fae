"""The Python standard library and the I/O libraries under every framework: in-process waits
(futures, threading, queues, multiprocessing, zmq), HTTP and sockets, the event loop,
subprocesses, sleeping (native frames), and the plumbing frames of contextlib and functools."""

from __future__ import annotations

from slime_hangdoctor.analysis.signatures.common import ANY, Block, WaitSig, native_waits, waits

WAITS: tuple[WaitSig, ...] = (
    *waits(
        Block.WAIT, "concurrent/futures/_base.py", "result wait as_completed _wait_for_tstate_lock"
    ),
    *waits(Block.WAIT, "threading.py", "wait join _wait_for_tstate_lock acquire"),
    *waits(Block.WAIT, "queue.py", "get put join"),
    *waits(Block.WAIT, "multiprocessing/connection.py", "recv recv_bytes poll _poll wait"),
    *waits(Block.WAIT, "multiprocessing/pool.py", "get wait"),
    WaitSig(Block.WAIT, ANY, "zmq/"),
    WaitSig(Block.HTTP, ANY, "requests/"),
    WaitSig(Block.HTTP, ANY, "urllib3/"),
    WaitSig(Block.HTTP, ANY, "http/client.py"),
    WaitSig(Block.HTTP, ANY, "httpx/"),
    WaitSig(Block.HTTP, ANY, "httpcore/"),
    WaitSig(Block.HTTP, ANY, "aiohttp/"),
    WaitSig(Block.HTTP, ANY, "urllib/request.py"),
    *waits(Block.HTTP, "socket.py", "readinto recv recv_into accept create_connection"),
    *waits(Block.HTTP, "ssl.py", "read recv recv_into do_handshake"),
    *waits(Block.EVENT_LOOP, "selectors.py", "select"),
    *waits(Block.EVENT_LOOP, "asyncio/base_events.py", "_run_once run_forever run_until_complete"),
    *waits(Block.EVENT_LOOP, "asyncio/runners.py", "run"),
    *waits(Block.SUBPROCESS, "subprocess.py", "wait _wait _try_wait communicate _communicate"),
    *waits(Block.SUBPROCESS, "multiprocessing/popen_fork.py", "wait poll"),
)
NATIVE_WAITS: tuple[WaitSig, ...] = (*native_waits(Block.SLEEP, "clock_nanosleep nanosleep"),)

TRANSPARENT_FILES = ("contextlib.py", "functools.py")

# multiprocessing's child entry (`BaseProcess._bootstrap`, multiprocessing/process.py): in a forked
# child every frame outside it is the parent's, copied at the fork.
FORK_ENTRY = ("_bootstrap", "multiprocessing/process.py")
