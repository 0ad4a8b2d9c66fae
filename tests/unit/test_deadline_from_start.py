"""A one-shot run's deadline counts from the process's start (`--timeout`, "for the whole run"):
what the interpreter's start and the imports took is taken from it. Read from a real process."""

from __future__ import annotations

import subprocess
import sys

_AGED = (
    "import time; time.sleep({sleep}); "
    "from slime_hangdoctor.collect.options import process_age_s; print(process_age_s())"
)


def _age_after(sleep: float) -> float:
    out = subprocess.run(
        [sys.executable, "-c", _AGED.format(sleep=sleep)],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return float(out.stdout)


def test_a_process_that_slept_is_at_least_that_old() -> None:
    young, old = _age_after(0.0), _age_after(1.5)
    assert 0.0 < young < old
    assert 1.5 <= old < 1.5 + 30.0  # the start of a loaded machine's interpreter, at most


_RUN = (
    "import time; time.sleep({sleep})\n"
    "from slime_hangdoctor.collect import options\n"
    "given = options.CollectOptions(timeout_s=20.0)\n"
    "before = options.from_process_start(given).timeout_s\n"
    "options.mark_process_start()\n"
    "print(before, options.from_process_start(given).timeout_s,"
    " options.from_process_start(options.CollectOptions(timeout_s=1.0)).timeout_s)"
)


def test_the_deadline_left_is_the_timeout_less_the_age() -> None:
    """Marked by the program's entry, the deadline left is the timeout less the process's age (never
    under 1 s); unmarked (the CLI run inside another program), the timeout as given."""
    out = subprocess.run(
        [sys.executable, "-c", _RUN.format(sleep=1.5)],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    before, after, short = (float(x) for x in out.stdout.split())
    assert before == 20.0
    assert 20.0 - 30.0 < after <= 20.0 - 1.5
    assert short == 1.0
