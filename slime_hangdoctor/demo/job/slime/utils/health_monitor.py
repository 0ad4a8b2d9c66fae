"""`RolloutHealthMonitor` as slime/utils/health_monitor.py (`--use-fault-tolerance`): one thread of
the RolloutManager that calls every engine actor's `health_generate` each
`--rollout-health-check-interval` seconds and waits for the answer up to
`--rollout-health-check-timeout`. It is resumed by `generate` and paused only by `offload`, so in a
job without offload it keeps checking through the weight update: an engine actor runs one method at
a time, and while its `update_weights_from_distributed` blocks in the weight broadcast the check
queues behind it on the actor (open-instruct PR#1454's shape). On a failed check slime kills the
engine; the demo only logs it (the demo's timeout outlasts a doctor run)."""

from __future__ import annotations

import argparse
import logging
import threading
from typing import Any

import ray

logger = logging.getLogger(__name__)


class RolloutHealthMonitor:
    def __init__(self, rollout_manager: Any, args: argparse.Namespace) -> None:
        self._rollout_manager = rollout_manager
        self._check_interval = float(args.rollout_health_check_interval)
        self._check_timeout = float(args.rollout_health_check_timeout)
        self._stop = threading.Event()
        self._resumed = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        logger.info("Starting RolloutHealthMonitor...")
        self._thread = threading.Thread(
            target=self._health_monitor_loop, name="RolloutHealthMonitor", daemon=True
        )
        self._thread.start()

    def resume(self) -> None:
        if not self._resumed.is_set():
            logger.info("Resuming health monitor...")
        self._resumed.set()

    def pause(self) -> None:
        if self._resumed.is_set():
            logger.info("Pausing health monitor...")
        self._resumed.clear()

    def _health_monitor_loop(self) -> None:
        while not self._stop.wait(self._check_interval):
            if self._resumed.is_set():
                self._run_health_checks()

    def _run_health_checks(self) -> None:
        for i, engine in enumerate(self._rollout_manager.rollout_engines):
            if engine is not None and self._resumed.is_set():
                self._check_engine_health(i, engine)

    def _check_engine_health(self, rollout_engine_id: int, engine: Any) -> None:
        try:
            ray.get(
                engine.health_generate.remote(timeout=self._check_timeout),
                timeout=self._check_timeout,
            )
        except Exception as e:
            logger.error(f"Health check failed for rollout engine {rollout_engine_id}: {e}")
