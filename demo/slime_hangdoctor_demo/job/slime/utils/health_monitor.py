"""`RolloutHealthMonitor` as slime main's slime/utils/health_monitor.py (624b824, lines 10-177),
one per server group (`--use-fault-tolerance`; RolloutManager.__init__, slime/ray/rollout.py:410-416):
a thread of the RolloutManager that calls each of its group's engine actors' `health_generate`
every `--rollout-health-check-interval` seconds and waits for the answer. It starts paused; the
RolloutManager resumes it in `generate` and `eval` and pauses it in `offload` and in
`recover_updatable_engines` (the step before every weight update), so in slime the check never
meets a weight update. An engine actor runs one method at a time: a check sent while the actor is
in a long call queues behind it. On a failed check slime kills the engine (`_kill_engine`)."""

from __future__ import annotations

import argparse
import logging
import threading
from typing import Any

import ray

logger = logging.getLogger(__name__)


class RolloutHealthMonitor:
    """Health monitor for rollout engines: started once, paused / resumed around offload."""

    def __init__(self, server_group: Any, args: argparse.Namespace) -> None:
        self._server_group = server_group
        self._thread: threading.Thread | None = None
        self._stop_event: threading.Event | None = None
        self._pause_event: threading.Event | None = None  # When set, health checking is paused
        self._check_interval = float(args.rollout_health_check_interval)
        self._check_timeout = float(args.rollout_health_check_timeout)
        self._check_first_wait = float(args.rollout_health_check_first_wait)
        self._need_first_wait = True  # Need to wait after each resume
        self._is_checking_enabled = False

    def start(self) -> bool:
        """Start the monitor thread, paused until resume() (health_monitor.py:35-59)."""
        if not self._server_group.all_engines:
            return False
        if self._thread is not None:
            logger.warning("Health monitor thread is already running.")
            return True
        logger.info("Starting RolloutHealthMonitor...")
        self._stop_event = threading.Event()
        self._pause_event = threading.Event()
        self._pause_event.set()  # Start in paused state until resume() is called
        self._thread = threading.Thread(
            target=self._health_monitor_loop, name="RolloutHealthMonitor", daemon=True
        )
        self._thread.start()
        logger.info("RolloutHealthMonitor started (in paused state).")
        return True

    def stop(self) -> None:
        """Stop the thread (health_monitor.py:61-82)."""
        if not self._thread or self._stop_event is None:
            return
        logger.info("Stopping RolloutHealthMonitor...")
        self._stop_event.set()
        if self._pause_event:
            self._pause_event.clear()
        self._thread.join(timeout=self._check_timeout + self._check_interval + 5)
        self._thread = None
        self._stop_event = None
        self._pause_event = None
        self._is_checking_enabled = False

    def pause(self) -> None:
        """Pause health checking. Called when engines are offloaded (health_monitor.py:84-90)."""
        if self._pause_event is None:
            return
        logger.info("Pausing health monitor...")
        self._pause_event.set()
        self._is_checking_enabled = False

    def resume(self) -> None:
        """Resume health checking. Called when engines are onloaded (health_monitor.py:92-99)."""
        if self._pause_event is None:
            return
        logger.info("Resuming health monitor...")
        self._need_first_wait = True
        self._pause_event.clear()
        self._is_checking_enabled = True

    def is_checking_enabled(self) -> bool:
        return self._is_checking_enabled

    def _health_monitor_loop(self) -> None:
        """health_monitor.py:105-135."""
        assert self._stop_event is not None
        assert self._pause_event is not None
        while not self._stop_event.is_set():
            while self._pause_event.is_set() and not self._stop_event.is_set():
                self._stop_event.wait(timeout=0.5)
            if self._stop_event.is_set():
                break
            if self._need_first_wait:
                logger.info(
                    f"Health monitor doing first wait after resume: {self._check_first_wait}s"
                )
                if self._stop_event.wait(self._check_first_wait):
                    break
                if self._pause_event.is_set():
                    continue
                self._need_first_wait = False
            if not self._pause_event.is_set() and not self._stop_event.is_set():
                self._run_health_checks()
            if self._stop_event.wait(self._check_interval):
                break

    def _run_health_checks(self) -> None:
        for rollout_engine_id, engine in enumerate(self._server_group.engines):
            if self._stop_event is not None and self._stop_event.is_set():
                break
            if self._pause_event is not None and self._pause_event.is_set():
                break
            self._check_engine_health(rollout_engine_id, engine)

    def _check_engine_health(self, rollout_engine_id: int, engine: Any) -> None:
        """health_monitor.py:145-158: no Ray timeout on the get, only the engine's own."""
        if engine is None:
            logger.info(f"Skipping health check for engine {rollout_engine_id} (None)")
            return
        try:
            ray.get(engine.health_generate.remote(timeout=self._check_timeout))
        except Exception as e:
            logger.error(
                f"Health check failed for rollout engine {rollout_engine_id} (ray timeout or "
                f"error). Killing actor. Exception: {e}"
            )
            self._kill_engine(rollout_engine_id=rollout_engine_id)
        else:
            logger.debug(f"Health check passed for rollout engine {rollout_engine_id}")

    def _kill_engine(self, rollout_engine_id: int) -> None:
        """health_monitor.py:160-177."""
        logger.info(f"Killing server group {rollout_engine_id}...")
        npe = self._server_group.nodes_per_engine
        for i in range(rollout_engine_id * npe, (rollout_engine_id + 1) * npe):
            engine = self._server_group.all_engines[i]
            if engine:
                try:
                    ray.get(engine.shutdown.remote())
                    ray.kill(engine)
                except Exception as e:
                    logger.warning(f"Fail to kill engine at index {i} (e: {e})")
            self._server_group.all_engines[i] = None
