"""Bundles given to `analyse` are untrusted (issue 22, items 5, 6 and 8): a crafted archive, pickle
or manifest must be refused or become a blind spot, in bounded time and memory, through the real
CLI. Each attack is built here as an attacker would build it (crafted bytes are the real input);
the bundles around them are recorded demo bundles (tests/fixtures/analysis/demo).

Memory is the CLI process's peak RSS (`run_cli_measured`), compared with the same CLI analysing
the recorded bundle it was derived from."""

from __future__ import annotations

import gzip
import json
import tarfile
from functools import cache
from pathlib import Path
from typing import Any

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


# --------------------------------------------------------------------------- item 6: pickles

FR_BUNDLE = (
    Path(__file__).resolve().parents[1] / "fixtures" / "bundles" / "gpu-h200-broadcast-hang-fr"
)


@pytest.mark.parametrize(
    ("attack", "said"),
    [
        (b"\x80\x02}r" + (2**26).to_bytes(4, "little") + b".", "memo index 67108864 out of order"),
        (b"cos\nsystem\n(S'touch PWNED'\ntR.", "refused global os.system"),
    ],
    ids=["memo-index-bomb", "os-system"],
)
def test_a_hostile_flight_recorder_dump_is_a_blind_spot(
    tmp_path: Path, attack: bytes, said: str
) -> None:
    """Item 6 through the CLI: rank 0's dump of a recorded GPU bundle replaced by the 9-byte
    memo-index bomb (the C unpickler allocated a GiB for it) or an os.system pickle. The dump is
    a "could not parse" blind spot, the rest of the bundle is analysed, memory stays at baseline
    and nothing runs."""
    import shutil

    root = tmp_path / "bundle"
    shutil.copytree(FR_BUNDLE, root)
    (root / "raw" / "flight_recorder" / "192.0.2.2" / "rank0.pkl").write_bytes(attack)
    proc, _, peak = run_cli_measured("analyse", "--json", str(root), timeout=120)
    assert peak - _baseline_rss() < GROWTH_LIMIT, peak
    verdict = json.loads(proc.stdout)
    assert any(
        b.startswith("flight_recorder rank0: could not parse:") and said in b
        for b in verdict["blind_spots"]
    ), verdict["blind_spots"]
    assert not (Path.cwd() / "PWNED").exists()


# --------------------------------------------------------------------------- item 8: parsing


def _demo_dir(tmp_path: Path, name: str = "none") -> Path:
    """A recorded demo bundle, unpacked to a directory that the attack then edits."""
    with tarfile.open(DEMO / f"{name}.tar.gz") as tar:
        tar.extractall(tmp_path / "unpacked", filter="data")
    (root,) = (tmp_path / "unpacked").iterdir()
    return root


def _processes_records(root: Path) -> list[dict[str, Any]]:
    manifest = json.loads((root / "manifest.json").read_text())
    return [p for p in manifest["probes"] if p["source"] == "processes"]


def _small_rows(size: int, first_pid: int = 100_000) -> str:
    """`{"pid": N, "ppid": 1}` rows, `size` bytes of them: the most objects a byte buys."""
    row = 24  # len('{"pid":100000,"ppid":1},'): six-digit pids throughout
    count = size // row + 1
    return ",".join(f'{{"pid":{first_pid + i},"ppid":1}}' for i in range(count))


def _with_rows(doc_text: str, rows: str) -> str:
    doc = json.loads(doc_text)
    head = json.dumps({**doc, "processes": []})
    return head.replace('"processes": []', f'"processes": [{rows}]')


def _analyse_json(root: Path) -> tuple[dict[str, Any], float, int]:
    proc, wall, peak = run_cli_measured("analyse", "--json", str(root), timeout=120)
    assert proc.returncode in (0, 1, 2, 3), proc.stderr
    assert "Traceback" not in proc.stderr
    return json.loads(proc.stdout), wall, peak


def test_a_16_mib_processes_artefact_is_not_parsed(tmp_path: Path) -> None:
    """Item 8: a 16 MiB processes JSON of small rows (700,000 processes) took 809 MiB and 22 s.
    Over the cap of its source (8 MiB; a 1000-process node writes about 0.5 MiB) it is not read:
    a blind spot that says why, at baseline memory."""
    root = _demo_dir(tmp_path)
    artefact = root / _processes_records(root)[0]["artifact"]
    artefact.write_text(_with_rows(artefact.read_text(), _small_rows(16 * MiB)))
    assert artefact.stat().st_size >= 16 * MiB
    verdict, wall, peak = _analyse_json(root)
    assert peak - _baseline_rss() < GROWTH_LIMIT, peak
    assert any(
        "processes" in b and "not parsed" in b and "over the 8388608 bytes kept" in b
        for b in verdict["blind_spots"]
    ), verdict["blind_spots"]
    assert wall < 60, wall


def test_records_that_share_one_artefact_are_refused(tmp_path: Path) -> None:
    """Item 8: eight manifest records naming one 4 MiB processes artefact (small rows) took
    959 MiB and 61 s: each record parsed it again. The second and later records are refused (a
    manifest of ours never shares an artefact), and the first is over the row cap."""
    root = _demo_dir(tmp_path)
    manifest_path = root / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    first = next(p for p in manifest["probes"] if p["source"] == "processes")
    artefact = root / first["artifact"]
    artefact.write_text(_with_rows(artefact.read_text(), _small_rows(4 * MiB)))
    manifest["probes"].extend({**first, "target": f"copy{i}", "sample": 0} for i in range(7))
    manifest_path.write_text(json.dumps(manifest))
    verdict, wall, peak = _analyse_json(root)
    assert peak - _baseline_rss() < GROWTH_LIMIT, peak
    shared = [b for b in verdict["blind_spots"] if "is another record's" in b]
    assert len(shared) == 7, verdict["blind_spots"]
    assert any("more than 10000 processes" in b for b in verdict["blind_spots"])
    assert wall < 60, wall


def test_the_parse_budget_of_a_bundle_is_a_blind_spot_not_an_error(tmp_path: Path) -> None:
    """Item 8: across records, at most MAX_PARSE_COST is parsed; the records past it are a blind
    spot ("parse budget exhausted"), and the verdict still comes."""
    from slime_hangdoctor.load import MAX_PARSE_COST

    root = _demo_dir(tmp_path)
    manifest_path = root / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    first = next(p for p in manifest["probes"] if p["source"] == "processes")
    text = (root / first["artifact"]).read_text()
    # distinct artefacts of real rows (each under the caps) until the budget is spent
    rows = json.loads(text)["processes"]
    big = _with_rows(text, ",".join(json.dumps(r) for r in rows * (7000 // len(rows))))
    count = MAX_PARSE_COST // (len(big) + 256 * big.count("{")) + 2
    for i in range(count):
        name = f"raw/processes/192.0.2.2/extra{i}.json"
        (root / name).write_text(big)
        manifest["probes"].append({**first, "target": f"extra{i}", "artifact": name})
    manifest_path.write_text(json.dumps(manifest))
    verdict, _, _ = _analyse_json(root)
    assert any("parse budget exhausted" in b for b in verdict["blind_spots"]), verdict[
        "blind_spots"
    ]


# --------------------------------------------------------------------------- issue 32, point 5


def _manifest_of_tiny_lists(root: Path, size: int, digits: bool) -> None:
    """The bundle's own manifest, with `size` bytes of tiny JSON lists under one of its options
    (the manifest was decoded whole, with no cap but the 300 MiB artefact one): `[]` repeated, or
    `[d,[d]]` of random digits (they do not pack: a .tar.gz of it stays under the ratio cap)."""
    import random

    rng = random.Random(32)
    manifest_path = root / "manifest.json"
    text = json.dumps({**json.loads(manifest_path.read_text()), "options": {"x": []}})
    if digits:
        count = size // len("[0,[0]],") + 1
        items = ",".join(f"[{rng.randrange(10)},[{rng.randrange(10)}]]" for _ in range(count))
    else:
        items = ",".join(["[]"] * (size // len("[],") + 1))
    manifest_path.write_text(text.replace('"x": []', '"x": [' + items + "]"))


@pytest.mark.parametrize(
    ("size", "digits", "said"),
    [
        (40 * MiB, True, "not a regular file of at most 32 MiB"),  # the review's 40 MiB
        (24 * MiB, False, "JSON objects and lists"),  # under the byte cap: the count stops it
    ],
    ids=["40-MiB", "24-MiB-of-empty-lists"],
)
def test_a_manifest_of_tiny_lists_is_refused_before_it_is_decoded(
    tmp_path: Path, size: int, digits: bool, said: str
) -> None:
    """Point 5: a 40 MiB manifest of tiny lists made `analyse` take about 1 GB (json.loads built
    every list). The manifest is read under a byte cap and its containers counted before it is
    decoded: exit 3 with the reason, memory at the baseline; as a directory and as a .tar.gz."""
    root = _demo_dir(tmp_path)
    _manifest_of_tiny_lists(root, size, digits)
    assert (root / "manifest.json").stat().st_size >= size
    archive = tmp_path / "crafted.tar.gz"
    # the fastest level: at the default 9 gzip spent ~30 s of CPU on the 40 MiB of random digits;
    # a lower level only packs less (a lower ratio), and the refusal is the manifest's own
    with tarfile.open(archive, "w:gz", compresslevel=1) as tar:
        tar.add(root, arcname=root.name)
    for target in (root, archive):
        proc, wall, peak = run_cli_measured("analyse", str(target), timeout=120)
        out = " ".join((proc.stdout + proc.stderr).split())
        assert proc.returncode == 3, out[-2000:]
        assert said in out, out[-2000:]
        assert "Traceback" not in proc.stderr
        assert peak - _baseline_rss() < GROWTH_LIMIT, (target, peak)
        assert wall < 60, wall
