"""Bundles given to `analyse` are untrusted (issue 22, items 5, 6 and 8): a crafted archive, pickle
or manifest must be refused or become a blind spot, in bounded time and memory, through the real
CLI. Each attack is built here as an attacker would build it (crafted bytes are the real input);
the bundles around them are recorded demo bundles (tests/fixtures/analysis/demo).

Memory is the CLI process's peak RSS (`run_cli_measured`), compared with the same CLI analysing
the recorded bundle it was derived from."""

from __future__ import annotations

import gzip
import tarfile
from functools import cache
from pathlib import Path

import pytest

from tests.integration.cli import run_cli_measured

DEMO = Path(__file__).resolve().parents[1] / "fixtures" / "analysis" / "demo"
MiB = 1024 * 1024
HEADER_BOMB_BYTES = 300 * MiB  # what the crafted header declares (and holds, packed ~1000:1)
GROWTH_LIMIT = 100 * MiB  # peak RSS over the baseline analyse


@cache
def _baseline_rss() -> int:
    """Peak RSS of `analyse` on a small recorded bundle: the interpreter, imports, a verdict."""
    proc, _, peak = run_cli_measured("analyse", str(DEMO / "none.tar.gz"))
    assert proc.returncode in (0, 1, 2, 3), proc.stderr
    return peak


def _header_bomb(path: Path, kind: bytes) -> Path:
    """A .tar.gz whose first member is an extended header (`kind`: GNU long name 'L' or pax 'x')
    declaring HEADER_BOMB_BYTES, and holding them: tarfile reads such a header whole while it
    iterates, before any caller's cap."""
    info = tarfile.TarInfo(
        "././@LongLink" if kind == tarfile.GNUTYPE_LONGNAME else "./PaxHeaders/x"
    )
    info.type = kind
    info.size = HEADER_BOMB_BYTES
    chunk = b"a" * MiB
    member = tarfile.TarInfo("b/manifest.json")  # the member the header would name
    with gzip.open(path, "wb", compresslevel=9) as gz:
        gz.write(info.tobuf(format=tarfile.GNU_FORMAT))
        for _ in range(HEADER_BOMB_BYTES // MiB):
            gz.write(chunk)
        gz.write(member.tobuf(format=tarfile.GNU_FORMAT))
        gz.write(bytes(2 * tarfile.BLOCKSIZE))
    return path


@pytest.mark.parametrize(
    ("kind", "what"),
    [(tarfile.GNUTYPE_LONGNAME, "GNU long name"), (tarfile.XHDTYPE, "pax")],
)
def test_tar_header_memory_bomb_is_refused(tmp_path: Path, kind: bytes, what: str) -> None:
    """Item 5: a ~1 MB .tar.gz whose extended header declares 300 MiB made `analyse` take over a
    GiB (tarfile buffered the header whole while iterating). Now the header is checked block by
    block before tarfile reads it: exit 3 (UNKNOWN), a clear message, and no memory growth."""
    path = _header_bomb(tmp_path / "bomb.tar.gz", kind)
    assert path.stat().st_size < 2 * MiB
    proc, wall, peak = run_cli_measured("analyse", str(path))
    assert proc.returncode == 3, (proc.stdout, proc.stderr)
    assert peak - _baseline_rss() < GROWTH_LIMIT, peak
    assert f"a {what} header of {HEADER_BOMB_BYTES} bytes" in proc.stderr + proc.stdout
    assert "Traceback" not in proc.stderr
    assert wall < 60, wall
