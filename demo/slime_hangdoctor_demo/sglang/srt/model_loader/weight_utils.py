"""Reading a checkpoint's weight files (as `sglang/srt/model_loader/weight_utils.py`).

SGLang 0.5.15.post1 reads each safetensors shard in `safetensors_weights_iterator`, a generator
that the model's `load_weights` consumes: with `--weight-loader-disable-mmap` it reads the whole
file (`safetensors.torch.load(f.read())`), else it maps it and copies each tensor out
(`safe_open(...).get_tensor`). The stand-in's checkpoints are the demo trainer's `torch.save`
files and its model keeps no real weights: it reads every weight file in 1 MiB reads (`f.read`,
as the disable-mmap path, so a slow storage shows in the reader's read calls) and keeps a digest
of each, per file, as the iterator yields a tensor per name.
"""

from __future__ import annotations

import glob
import hashlib
import os
from collections.abc import Iterator

READ_BYTES = 1 << 20
# DefaultModelLoader._prepare_weights: safetensors shards first, then the PyTorch .bin files
WEIGHT_PATTERNS = ("*.safetensors", "*.bin")
# Demo fault `slow_weight_storage`: the engine's host sees the shared weight-sync directory
# through a slow mount beside it (job/user_plugins/slow_storage.py serves it)
SLOW_MOUNT_SUFFIX = ".slow-mount"


def weight_files(model_path: str) -> list[str]:
    """The weight files of a local checkpoint directory; FileNotFoundError when it has none (the
    loader's "Failed to get weights iterator")."""
    if not os.path.isfile(os.path.join(model_path, "config.json")):
        raise FileNotFoundError(f"{os.path.join(model_path, 'config.json')} not found")
    for pattern in WEIGHT_PATTERNS:
        found = sorted(glob.glob(os.path.join(model_path, pattern)))
        if found:
            return found
    raise FileNotFoundError(f"no weight files in {model_path}")


def weights_iterator(files: list[str]) -> Iterator[tuple[str, str]]:
    """(file name, digest of its bytes) per weight file, reading each in READ_BYTES reads."""
    for path in files:
        digest = hashlib.blake2b(digest_size=8)
        with open(path, "rb") as f:
            while chunk := f.read(READ_BYTES):
                digest.update(chunk)
        yield os.path.basename(path), digest.hexdigest()


def slow_host_mount(model_path: str) -> str:
    """Where a host whose shared storage is slow (the fault) sees `model_path`: the same
    directory name under `<parent>.slow-mount`."""
    parent, name = os.path.split(os.path.abspath(model_path))
    return os.path.join(parent + SLOW_MOUNT_SUFFIX, name)
