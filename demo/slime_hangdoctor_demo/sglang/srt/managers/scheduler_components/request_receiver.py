"""Request intake of an engine with several TP ranks (as SGLang 0.5.15.post1
`sglang/srt/managers/scheduler_components/request_receiver.py`).

TP rank 0 pulls the requests that reached it (`_pull_raw_reqs`, :101-139: only rank 0 reads the
tokenizer's socket) and every rank then takes part in `broadcast_pyobj` over the TP group's gloo CPU
group (`_broadcast_reqs_across_ranks`, :141-201, the `elif self.ps.tp_size != 1` branch at
:194-200). A rank other than 0 therefore waits inside `broadcast_pyobj` until rank 0 comes back to
`recv_requests`: between batches that is a few milliseconds, after a rank 0 that never returns it is
for ever."""

from __future__ import annotations

import os
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from slime_hangdoctor_demo.sglang.srt.distributed.parallel_state import GroupCoordinator
from slime_hangdoctor_demo.sglang.srt.managers.io_struct import recv_msg
from slime_hangdoctor_demo.sglang.srt.utils.common import broadcast_pyobj

Msg = dict[str, Any]


class SchedulerRequestReceiver:
    def __init__(
        self,
        recv_from_tokenizer: Connection | None,
        tp_group: GroupCoordinator,
        is_busy: Callable[[], bool],
    ) -> None:
        self.recv_from_tokenizer = recv_from_tokenizer
        self.tp_group = tp_group
        self.tp_cpu_group = tp_group.cpu_group
        self.is_busy = is_busy

    def recv_requests(self) -> list[Msg]:
        """Receive requests at tp_rank 0 and broadcast them to all other TP ranks."""
        recv_reqs = self._pull_raw_reqs()
        return self._broadcast_reqs_across_ranks(recv_reqs)

    def _pull_raw_reqs(self) -> list[Msg] | None:
        if self.tp_group.rank != 0 or self.recv_from_tokenizer is None:
            return None
        conn = self.recv_from_tokenizer
        reqs: list[Msg] = []
        # SGLang polls with zmq.NOBLOCK and spins; an idle stand-in waits up to 50 ms (CPU)
        timeout = 0.0 if self.is_busy() else 0.05
        while conn.poll(timeout):
            try:
                reqs.append(recv_msg(conn))
            except (EOFError, OSError):
                os._exit(0)
            timeout = 0.0
        return reqs

    def _broadcast_reqs_across_ranks(self, recv_reqs: list[Msg] | None) -> list[Msg]:
        return broadcast_pyobj(
            recv_reqs,
            self.tp_group.rank,
            self.tp_cpu_group,
            src=self.tp_group.ranks[0],
        )
