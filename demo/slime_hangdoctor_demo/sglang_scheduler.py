"""Entry point of the SGLang stand-in's child processes (`sglang::scheduler_TP0`, `sglang::detokenizer`).

The HTTP process (`sglang_server`) starts this module with the real interpreter (`sys.executable`,
so a venv, `uv venv` or conda environment stays that environment) and `--title`; the module sets the
title first thing with `setproctitle`, as SGLang 0.5.15's `run_scheduler_process` does:
`/proc/<pid>/cmdline` then reads `sglang::scheduler_TP0` (followed by empty arguments), and comm
(psutil `name()`) is its first 15 bytes (setproctitle's prctl).

The scheduler itself lives in `demo/slime_hangdoctor_demo/sglang/srt/...`, in the files and under the
function names SGLang uses (`managers/scheduler.py: Scheduler.event_loop_normal`, `run_batch`,
`managers/tp_worker.py`, `model_executor/model_runner.py: forward_decode`,
`update_weights_from_distributed`, `utils/common.py: init_custom_process_group`), so py-spy stacks
of the stand-in look like reference/sglang.md §5.

Weight sync is real: `init_weights_update_group` joins a torch.distributed group (gloo: no GPU here,
so a requested "nccl" backend is served by gloo) through `init_custom_process_group`, and
`update_weights_from_distributed` receives real `broadcast(src=0)` calls. A trainer joins the same
group with `init_custom_process_group(backend, init_method, world_size, rank=0, group_name)`,
re-exported here. torch is imported only there.

The children die with the HTTP process (PR_SET_PDEATHSIG plus a parent-pid poll).
"""

from __future__ import annotations

import argparse
import signal
from multiprocessing.connection import Connection

import setproctitle

from slime_hangdoctor_demo.sglang.srt.managers.detokenizer_manager import run_detokenizer_process
from slime_hangdoctor_demo.sglang.srt.managers.io_struct import FAULTS, Msg, recv_msg, send_msg
from slime_hangdoctor_demo.sglang.srt.managers.scheduler import run_scheduler_process
from slime_hangdoctor_demo.sglang.srt.utils.common import (
    init_custom_process_group,
    kill_itself_when_parent_died,
)

__all__ = ["FAULTS", "Msg", "init_custom_process_group", "main", "recv_msg", "send_msg"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="SGLang stand-in scheduler (internal)")
    parser.add_argument("--role", choices=("scheduler", "detokenizer"), default="scheduler")
    parser.add_argument("--fd", type=int, default=-1)
    # the scheduler's end of its pair with the detokenizer (TP rank 0), the detokenizer's end of it
    parser.add_argument("--detokenizer-fd", type=int, default=-1)
    parser.add_argument("--parent-pid", type=int, required=True)
    parser.add_argument("--title", default="")
    args = parser.parse_args(argv)
    setproctitle.setproctitle(args.title or f"sglang::{args.role}")
    kill_itself_when_parent_died(args.parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C reaches the HTTP process, not us
    if args.role == "detokenizer":
        run_detokenizer_process(
            Connection(args.detokenizer_fd), Connection(args.fd), args.parent_pid
        )
        return
    conn = Connection(args.fd)
    detok = Connection(args.detokenizer_fd) if args.detokenizer_fd >= 0 else None
    run_scheduler_process(conn, args.parent_pid, detok)


if __name__ == "__main__":
    main()
