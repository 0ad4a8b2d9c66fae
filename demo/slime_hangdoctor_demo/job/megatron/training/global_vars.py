"""`get_args` / `set_args` as megatron/training/global_vars.py: Megatron reads its arguments from a
process-wide global that its `initialize_megatron` sets."""

from __future__ import annotations

import argparse

_GLOBAL_ARGS: argparse.Namespace | None = None


def set_args(args: argparse.Namespace) -> None:
    global _GLOBAL_ARGS
    _GLOBAL_ARGS = args


def get_args() -> argparse.Namespace:
    if _GLOBAL_ARGS is None:
        raise RuntimeError("megatron args are not initialized")
    return _GLOBAL_ARGS
