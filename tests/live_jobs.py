"""The shared jobs of the live pool (tests/live_pool.py): one demo job each, that the parts of
several test modules run against in turn, so the suite starts it once.

- "none-job": the healthy demo job (`none`, a few train steps done): the doctor's verdict on it
  (test_attach_demo), the watchdog's ticks on a progressing job, then the poisoned `/server_info`
  (which leaves engine 0 poisoned: last).
- "stall-job": `rollout_engine_stuck` after 3 healthy steps: the watchdog's ticks from healthy to
  stalled, then the doctor's verdict on the stall (test_attach_demo).
- "secret-job": `train_rank_stuck` (quiet once it holds) with marked secrets in every place a
  slime job puts them (tests/reliability/secret_job.py): the secrets corpus, and the read-only
  checks of `attach` and `check` on its engines' request logs.
"""

from __future__ import annotations

from pathlib import Path

from slime_hangdoctor_demo.launch import DemoRun, start_demo
from tests.live_pool import Slot, shared_job

NONE_JOB = "none-job"
STALL_JOB = "stall-job"
SECRET_JOB = "secret-job"
STALL_AFTER_STEPS = 3


def _ready(run: DemoRun, timeout: float) -> DemoRun:
    """`run` once it has reached its fault (or its healthy steps); stopped if it never does."""
    try:
        run.wait_until_ready(timeout=timeout)
    except BaseException:
        run.stop()
        raise
    return run


def _none_job(slot: Slot, work: Path) -> DemoRun:
    return _ready(start_demo("none", workdir=work / "demo", head=slot.head), 150)


def _stall_job(slot: Slot, work: Path) -> DemoRun:
    run = start_demo(
        "rollout_engine_stuck",
        workdir=work / "demo",
        head=slot.head,
        fault_after_steps=STALL_AFTER_STEPS,
    )
    return _ready(run, 150)


def _secret_job(slot: Slot, work: Path) -> DemoRun:
    from tests.reliability.secret_job import ENV, job_args

    run = start_demo(
        "train_rank_stuck", workdir=work, extra_args=job_args(), extra_env=ENV, head=slot.head
    )
    return _ready(run, 200.0)


shared_job(NONE_JOB, _none_job)
shared_job(STALL_JOB, _stall_job, long=True)
shared_job(SECRET_JOB, _secret_job)
