"""CPU time of `check_plain_pickle`, the opcode walk every flight-recorder dump goes through before it
is loaded (issue 33: the walk split into functions of under 80 lines may cost at most 25 %).

    python -m benchmarks.bench_safe_pickle

prints one JSON object: the least CPU milliseconds of 7 checks of each input, the machine's load
average beside them. The inputs are real: every recorded dump under tests/fixtures (26 pickles
written by PyTorch's flight recorder, checked one after the other), the largest of them alone (a
2000-entry ring, 341 KB, protocol 2), and that dump loaded 16 times over and pickled as one list
by Python (protocols 2 and 4; 16 copies stay under the walk's caps: 46,000 objects and 98,000
references each). To compare two trees, unpack the older one and run the file (not `-m`, which
puts this tree first on the path) against each, alternately:

    git archive REV slime_hangdoctor | tar -x -C /tmp/old
    PYTHONPATH=/tmp/old nice -n 10 python benchmarks/bench_safe_pickle.py
    PYTHONPATH=$PWD nice -n 10 python benchmarks/bench_safe_pickle.py
"""

from __future__ import annotations

import json
import os
import pickle
import sys
import time
from pathlib import Path

from slime_hangdoctor.parsers.safe_pickle import check_plain_pickle

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures"
COPIES = 16


def inputs() -> dict[str, list[bytes]]:
    recorded = [p.read_bytes() for p in sorted(FIXTURES.rglob("*.pkl"))]
    largest = max(recorded, key=len)
    copies = [pickle.loads(largest) for _ in range(COPIES)]  # plain data, checked first below
    return {
        "recorded_dumps": recorded,
        "largest_recorded_dump": [largest],
        "copies_protocol_2": [pickle.dumps(copies, protocol=2)],
        "copies_protocol_4": [pickle.dumps(copies, protocol=4)],
    }


def _best_ms(pickles: list[bytes], rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        t0 = time.process_time()
        for data in pickles:
            check_plain_pickle(data)
        best = min(best, time.process_time() - t0)
    return round(best * 1e3, 2)


def main(rounds: int = 7) -> dict[str, object]:
    made = inputs()
    for pickles in made.values():  # each input is accepted (a refusal would time a shorter walk)
        for data in pickles:
            check_plain_pickle(data)
    load_before = os.getloadavg()
    ms = {name: _best_ms(pickles, rounds) for name, pickles in made.items()}
    return {
        "ms": ms,
        "bytes": {name: sum(map(len, pickles)) for name, pickles in made.items()},
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "module": sys.modules[check_plain_pickle.__module__].__file__,
    }


if __name__ == "__main__":
    print(json.dumps(main()))
