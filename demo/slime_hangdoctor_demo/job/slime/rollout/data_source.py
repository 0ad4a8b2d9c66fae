"""The prompt source of the demo: a tiny arithmetic dataset, cycled forever."""

from __future__ import annotations

import argparse
import copy

from slime.utils.types import Sample

_PROBLEMS: list[tuple[str, str]] = [
    ("What is 3+4? Put the answer in \\boxed{}.", "7"),
    ("Compute 12*3.", "36"),
    ("Simplify (x^2-1)/(x-1).", "x+1"),
    ("What is 2^10?", "1024"),
    ("Solve 2x+6=10 for x.", "2"),
    ("What is 81/9?", "9"),
    ("Evaluate 5!+1.", "121"),
    ("What is 15-27?", "-12"),
]


class RolloutDataSourceWithBuffer:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.dataset = _PROBLEMS * 4
        self.sample_offset = 0
        self.sample_group_index = 0
        self.sample_index = 0
        self.buffer: list[list[Sample]] = []

    def get_samples(self, num_samples: int) -> list[list[Sample]]:
        groups = self.buffer[:num_samples]
        self.buffer = self.buffer[num_samples:]
        while len(groups) < num_samples:
            prompt, label = self.dataset[self.sample_offset % len(self.dataset)]
            self.sample_offset += 1
            group = []
            for _ in range(self.args.n_samples_per_prompt):
                group.append(
                    Sample(
                        group_index=self.sample_group_index,
                        index=self.sample_index,
                        prompt=prompt,
                        label=label,
                    )
                )
                self.sample_index += 1
            self.sample_group_index += 1
            groups.append(group)
        return groups

    def add_samples(self, samples: list[list[Sample]]) -> None:
        for group in samples:
            for sample in group:
                sample.status = Sample.Status.PENDING
                sample.response, sample.response_length, sample.reward = "", 0, None
            self.buffer.append(copy.deepcopy(group))

    def eval_samples(self) -> list[Sample]:
        return [
            Sample(index=i, prompt=prompt, label=label)
            for i, (prompt, label) in enumerate(_PROBLEMS)
        ]
