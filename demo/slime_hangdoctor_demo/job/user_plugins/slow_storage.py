"""Demo fault `weight_load_slow_storage`: the slow shared storage one engine host reads from.

slime main's disk weight sync (`--update-weight-transport disk`) has the train ranks write each
version's HF checkpoint under `--update-weight-disk-dir` and every engine reload it from there
(`/update_weights_from_disk`): on a cluster that directory is shared storage (NFS, Lustre, a FUSE
mount of an object store such as gcsfuse, s3fs or mountpoint-s3), and one host's mount can be
slow. This process plays that storage for engine 1's host, as a FUSE daemon does: it mirrors every
version directory of the source under the mount (`MOUNT/weight_vNNNNNN/`), the small files as links
to the source and each weight file as a FIFO whose bytes it serves from the source file at `--rate`
bytes a second, in `--block` writes. The reader (engine 1's scheduler) blocks in the kernel inside
each read until the next block comes, as a read from a FUSE mount waits for its daemon's answer;
its `rchar` rises with every block while the storage layer's `read_bytes` stays 0 (FUSE and NFS
reads do not pass the block layer). It runs as a process of its own, detached from the job's
process tree (a daemon on the host, not a process of the job).

    python -m user_plugins.slow_storage --source DIR --mount DIR --rate BYTES --block BYTES
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from pathlib import Path

WEIGHT_SUFFIXES = (".safetensors", ".bin")
POLL_S = 0.05


def serve(source: Path, fifo: Path, rate: float, block: int) -> None:
    """Open the FIFO for writing (it waits for the reader), then feed it the source file's bytes
    at `rate`, on an absolute schedule (a late write does not lower the rate)."""
    with open(fifo, "wb", buffering=0) as out, open(source, "rb") as src:
        start = time.monotonic()
        sent = 0
        while chunk := src.read(block):
            due = start + sent / rate
            time.sleep(max(0.0, due - time.monotonic()))
            out.write(chunk)
            sent += len(chunk)


def mirror(version: Path, mount: Path, rate: float, block: int) -> None:
    """The mount's view of one version directory: links to its files, FIFOs for its weights."""
    target = mount / version.name
    target.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "pytorch_model.bin"):
        path = target / name
        if name.endswith(WEIGHT_SUFFIXES):
            os.mkfifo(path)
            threading.Thread(
                target=serve, args=(version / name, path, rate, block), daemon=True
            ).start()
        else:
            path.symlink_to(version / name)  # dangling until rank 0 writes it


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--source", type=Path, required=True)
    p.add_argument("--mount", type=Path, required=True)
    p.add_argument("--rate", type=float, required=True, help="bytes a second")
    p.add_argument("--block", type=int, default=32 << 10)
    args = p.parse_args()
    args.mount.mkdir(parents=True, exist_ok=True)
    seen: set[str] = set()
    while True:
        if args.source.is_dir():
            for version in sorted(args.source.glob("weight_v*")):
                if version.name not in seen and version.is_dir():
                    seen.add(version.name)
                    mirror(version, args.mount, args.rate, args.block)
        time.sleep(POLL_S)


if __name__ == "__main__":
    main()
