"""Logger set-up in slime's format: `[YYYY-mm-dd HH:MM:SS] file.py:line - msg`."""

from __future__ import annotations

import logging
import sys

_FORMAT = "[%(asctime)s] %(filename)s:%(lineno)d - %(message)s"


def configure_logger(level: int = logging.INFO) -> None:
    root = logging.getLogger()
    if any(getattr(h, "_slime_demo", False) for h in root.handlers):
        return
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter(_FORMAT, datefmt="%Y-%m-%d %H:%M:%S"))
    handler._slime_demo = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level)


def log_fault_armed(logger: logging.Logger, fault: str, where: str, rollout_id: int) -> None:
    """The demo's own marker line (not a slime line): the launcher waits for it."""
    logger.info(f"DEMO FAULT ARMED: {fault} at rollout {rollout_id} in {where}")
