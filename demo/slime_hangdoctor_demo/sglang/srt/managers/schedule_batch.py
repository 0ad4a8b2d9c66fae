"""Requests and batches of the stand-in scheduler (as `sglang/srt/managers/schedule_batch.py`)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class Req:
    rid: str
    input_len: int
    max_new_tokens: int
    target_len: int
    return_logprob: bool = False
    health: bool = False
    output_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    created: float = field(default_factory=time.time)

    def done(self) -> bool:
        return len(self.output_ids) >= self.target_len

    @property
    def num_tokens(self) -> int:
        return self.input_len + len(self.output_ids)


@dataclass
class ScheduleBatch:
    mode: str  # prefill | decode
    reqs: list[Req]
