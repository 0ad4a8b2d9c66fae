"""A stand-in slime train rank for the reliability suite: a Python process that titles itself
`--title` (the harness gives `ray::MegatronTrainRayActor.train`) with setproctitle, as Ray titles
its workers, so `--local` discovery finds it as a train rank, exactly as it finds a real Ray actor
by its title. Its command line after the title keeps the other arguments (the secrets test gives it
an `--api-key`, which the doctor must redact).

    rank.py --title TITLE READY_FILE [--spin]
            [--fr-pipe PREFIX --fr-dump PREFIX --fr-mode MODE --fr-dump-from F]

It writes READY_FILE once set up, then waits in `train_step` (a sleep loop) until killed. The
flight-recorder mode says what it does with its debug pipe `<PREFIX><RANK>.pipe` (RANK from the
environment), as a PyTorch watchdog does with TORCH_NCCL_DEBUG_INFO_PIPE_FILE:
  no-reader  creates the FIFO and never opens it (the watchdog is gone)
  no-dump    reads the FIFO and logs every byte to READY_FILE.pokes, but never writes a dump
  dump       reads the FIFO, logs every byte, and writes the bytes of FILE (a real flight-recorder
             pickle) to <dump PREFIX><RANK> (then hands it to --fr-dump-owner UID when given)
  link       reads the FIFO, logs every byte, and makes <dump PREFIX><RANK> a symlink to FILE: a
             job environment that points a root doctor at a file it should never read
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time

import setproctitle


def _serve_pipe(
    pipe: str, dump: str | None, pokes: str, dump_from: str | None, mode: str, owner: int | None
) -> None:
    fd = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)
    while True:
        try:
            data = os.read(fd, 64)
        except BlockingIOError:
            data = b""
        if data:
            with open(pokes, "ab") as fh:
                fh.write(data)
            if dump is not None and dump_from is not None:
                tmp = dump + ".tmp"
                if mode == "link":
                    os.symlink(dump_from, tmp)
                else:
                    with open(dump_from, "rb") as src, open(tmp, "wb") as fh:
                        fh.write(src.read())
                    if owner is not None:
                        os.chown(tmp, owner, owner)
                os.replace(tmp, dump)
        time.sleep(0.05)


def train_step(spin: bool) -> None:
    while True:
        if spin:
            sum(range(10_000))
        else:
            time.sleep(0.2)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--title", required=True)
    ap.add_argument("ready")
    ap.add_argument("--fr-pipe")
    ap.add_argument("--fr-dump")
    ap.add_argument(
        "--fr-mode", default="no-reader", choices=("no-reader", "no-dump", "dump", "link")
    )
    ap.add_argument("--fr-dump-from")
    ap.add_argument("--fr-dump-owner", type=int, default=None)
    ap.add_argument("--spin", action="store_true")
    ns, _ = ap.parse_known_args()  # extra arguments: a command line as real ranks have
    title_at = sys.argv.index("--title")
    rest = sys.argv[:title_at] + sys.argv[title_at + 2 :]
    setproctitle.setproctitle(" ".join([ns.title, *rest]))
    rank = os.environ.get("RANK", "0")
    if ns.fr_pipe:
        pipe = f"{ns.fr_pipe}{rank}.pipe"
        os.mkfifo(pipe, 0o600)
        if ns.fr_mode != "no-reader":
            dump = f"{ns.fr_dump}{rank}" if ns.fr_mode in ("dump", "link") else None
            threading.Thread(
                target=_serve_pipe,
                args=(
                    pipe,
                    dump,
                    ns.ready + ".pokes",
                    ns.fr_dump_from,
                    ns.fr_mode,
                    ns.fr_dump_owner,
                ),
                daemon=True,
            ).start()
    with open(ns.ready, "w", encoding="utf-8") as fh:
        fh.write(str(os.getpid()))
    sys.stdout.flush()
    train_step(ns.spin)


if __name__ == "__main__":
    main()
