"""`watch` outlives a run that raises (issue 43): the soak's full disk once ended it with "internal
error" from a buffered close; whatever the next such error is, that run is UNKNOWN with the error
named, and the watch goes on to its next run. The runs are real `run_check`s (`--local` for a user
with no processes, so the verdict is the same on any machine); the first is made to raise the
error the soak met, as the kernel raised it (ENOSPC)."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from slime_hangdoctor.collect.options import CollectOptions
from slime_hangdoctor.verdict import ExitCode
from slime_hangdoctor.watchdog import run as watchdog


def test_a_run_that_raises_is_unknown_and_the_watch_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = watchdog.run_check
    calls: list[int] = []

    def once_failing(*args: Any, **kwargs: Any) -> watchdog.CheckResult:
        calls.append(1)
        if len(calls) == 1:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(*args, **kwargs)

    monkeypatch.setattr(watchdog, "run_check", once_failing)
    seen: list[watchdog.CheckResult] = []
    rc = watchdog.watch_loop(
        None,
        CollectOptions(local=True, uid=65533, timeout_s=30.0),
        watchdog.CheckOptions(state_file=tmp_path / "state" / "state.json"),
        interval_s=0.0,
        max_runs=2,
        on_result=seen.append,
    )
    assert len(seen) == 2 and rc == ExitCode.OK  # the second, real run: no job, idle
    first = seen[0]
    assert first.exit_code == ExitCode.UNKNOWN
    assert "internal error in this run: OSError" in first.diagnosis.verdict.summary
    assert first.notes and "No space left on device" in first.notes[0]
