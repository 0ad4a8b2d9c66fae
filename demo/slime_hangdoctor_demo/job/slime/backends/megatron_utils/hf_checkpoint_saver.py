"""Save the (demo) Megatron model as a HuggingFace checkpoint at a directory, as slime main's
slime/backends/megatron_utils/hf_checkpoint_saver.py (624b824): `save_hf_model_to_path`
(lines 24-41) calls `save_hf_model_direct_to_path` (lines 44-...). slime gathers each tensor to
global rank 0 and writes safetensors shards beside the HF assets of --hf-checkpoint; the demo's
rank 0 writes `config.json` and one `pytorch_model.bin` (torch.save: no safetensors on the demo
box), the others wait at the caller's barrier."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


def save_hf_model_to_path(
    args: argparse.Namespace,
    output_dir: str | Path,
    model: dict[str, Any],
    *,
    model_name: str | None = None,
    quantization_config: dict[str, Any] | None = None,
    progress_desc: str = "Save HF checkpoint",
) -> None:
    """Save a Megatron model as an HF checkpoint at a concrete directory."""
    save_hf_model_direct_to_path(
        args,
        output_dir,
        model,
        model_name=model_name,
        quantization_config=quantization_config,
        progress_desc=progress_desc,
    )


def save_hf_model_direct_to_path(
    args: argparse.Namespace,
    output_dir: str | Path,
    model: dict[str, Any],
    *,
    model_name: str | None = None,
    quantization_config: dict[str, Any] | None = None,
    progress_desc: str = "Save HF checkpoint",
) -> None:
    import torch
    import torch.distributed as dist

    path = Path(output_dir)
    if dist.get_rank() != 0:
        return
    logger.info("Saving model in HuggingFace format to %s (%s)", path, progress_desc)
    path.mkdir(parents=True, exist_ok=True)
    config = {"model_type": model_name or "demo", "vocab_size": int(args.vocab_size)}
    if quantization_config is not None:
        config["quantization_config"] = quantization_config
    (path / "config.json").write_text(json.dumps(config))
    torch.save({name: t.contiguous() for name, t in model.items()}, path / "pytorch_model.bin")
