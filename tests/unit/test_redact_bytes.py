"""Issue 22 point 2: bytes that are not UTF-8 are redacted too, and byte caps cut on character
boundaries.

Before, `BundleWriter.add` stored an artefact that failed to decode as UTF-8 as it came, every
secret in it included: a log head cut by its byte cap inside one of tqdm's three-byte bar
characters, a log where another process's write split such a character, an engine body with one
stray byte. Each test performs that capture and searches every file the bundle holds (the raw
artefact, the manifest's JSON, the members of the .tar.gz) for the secret in each encoding a
bundle could hold it in; the bytes around the secret must come back exactly."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slime_hangdoctor.bundle import BundleWriter, ProbeRecord, archive
from slime_hangdoctor.collect import log_heads as lh
from slime_hangdoctor.collect.http import get
from slime_hangdoctor.outcome import Outcome
from slime_hangdoctor.parsers.logs import RAY_LOGS
from slime_hangdoctor.parsers.sglang import SGLANG
from slime_hangdoctor.redact import REDACTED, redact_bytes, utf8_prefix
from tests.fixtures import transforms as tf
from tests.reliability.harness import http_stub

FIXTURES = Path(__file__).parents[1] / "fixtures"
TQDM = (FIXTURES / "real/tqdm-4.70.1/rollout_generation.err").read_bytes()
SERVER_INFO = (FIXTURES / "sglang/server_info.json").read_text(encoding="utf-8")
API_KEY = "sk-SECRET-apikey-7f3a9c1e5b"  # the doctor's own --api-key (a known secret)
ADMIN_KEY = "SECRET-adminkey-2b8d4f6a0c"  # never given to the doctor: only patterns catch it
WANDB_KEY = "SECRET-wandbkey-5e4d3c2b1a"
WORKER = "worker-64e4653db7a019b8d66de20d68702bdcd40d7d4c8fedf933a20988ac-01000000"
# SGLang logs its server arguments at start-up (the line shape of test_collect_log_heads.py)
SERVER_ARGS = (
    f"server_args=ServerArgs(host='127.0.0.1', port=15003, api_key='{API_KEY}', "
    f"admin_api_key='{ADMIN_KEY}')\n"
).encode()


def _encodings(secret: str) -> list[bytes]:
    """The secret as a bundle could hold it: raw, JSON-escaped (the manifest), and base64 at each
    alignment (bundle.py writes no base64 today: searched so that an artefact added later that
    does is covered too)."""
    raw = secret.encode()
    found = [raw, json.dumps(secret).encode()[1:-1]]
    for pad in range(3):
        enc = base64.b64encode(b"x" * pad + raw)[4 if pad else 0 :]
        found.append(enc[: len(enc) - 4])  # the whole groups that hold only the secret's bytes
    return found


def _bundle_files(root: Path) -> dict[str, bytes]:
    """Every file of the bundle directory and every member of its .tar.gz."""
    files = {str(p): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    with tarfile.open(archive(root), "r:gz") as tar:
        for member in tar.getmembers():
            fh = tar.extractfile(member)
            if fh is not None:
                files[f"tar!{member.name}"] = fh.read()
    return files


def _assert_gone(root: Path, *secrets: str) -> None:
    for name, data in _bundle_files(root).items():
        for secret in secrets:
            for form in _encodings(secret):
                assert form not in data, (name, secret, form)


def _cut_inside_a_character(data: bytes, start: int) -> int:
    """A cap that keeps the lead byte of the first multibyte character at or after `start`
    and cuts off the rest of it."""
    i = start
    while data[i] < 0xC0:
        i += 1
    return i + 1


# The child: point fd 2 at `<dir>/<WORKER>-<pid>.err`, as Ray does, write the bytes of the file
# named in argv[3], say ready, wait.
_CHILD = """
import os, sys
folder, worker, path = sys.argv[1], sys.argv[2], sys.argv[3]
f = os.open(f"{folder}/{worker}-{os.getpid()}.err", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
os.dup2(f, 2)
os.write(2, open(path, "rb").read())
print("ready", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def engine_log(tmp_path: Path) -> Iterator[tuple[int, bytes]]:
    """A real process whose Ray worker log holds SGLang's server arguments, then tqdm's bars."""
    data = SERVER_ARGS + TQDM
    src = tmp_path / "log.bytes"
    src.write_bytes(data)
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(tmp_path), WORKER, str(src)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        yield proc.pid, data
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_a_log_head_cut_inside_a_tqdm_bar_keeps_no_secret(
    tmp_path: Path, engine_log: tuple[int, bytes]
) -> None:
    """The head's byte cap falls after the first byte of a bar block (U+258x, three bytes): the
    head is kept up to the last whole character, the API keys blanked, the rest byte for byte."""
    pid, data = engine_log
    cap = _cut_inside_a_character(data, len(SERVER_ARGS) + 200)
    w = BundleWriter(tmp_path / "b", command="test", known_secrets=(API_KEY,))
    rec = lh.record_log_heads(
        w, [(pid, "SGLangEngine")], node_ip=None, sample=0, timeout=5, max_bytes=cap
    )[0]
    w.finish()
    assert rec.outcome is Outcome.OK and rec.meta["truncated"] is True
    stored = (w.root / str(rec.artifact)).read_bytes()
    whole = data[: cap - 1]  # the cut character's lead byte dropped
    assert stored == whole.replace(API_KEY.encode(), REDACTED.encode()).replace(
        ADMIN_KEY.encode(), REDACTED.encode()
    )
    assert rec.meta["bytes"] == len(whole)
    stored.decode("utf-8")  # whole characters only
    _assert_gone(w.root, API_KEY, ADMIN_KEY)


def test_a_secret_after_a_split_character_is_blanked(tmp_path: Path) -> None:
    """Another process's line (a command line with --wandb-key, and the doctor's API key) lands
    inside one of tqdm's characters: the bytes before and after it are not UTF-8. Stored through
    BundleWriter.add as the log collectors store a log: the secrets are gone, every other byte,
    the split character's included, is kept."""
    at = _cut_inside_a_character(TQDM, 300)
    line = f"\nlaunch: python train.py --wandb-key {WANDB_KEY} --api-key {API_KEY}\n".encode()
    data = tf.interleave_write(TQDM, at, line)
    with pytest.raises(UnicodeDecodeError):
        data.decode("utf-8")
    w = BundleWriter(tmp_path / "b", command="test", known_secrets=(API_KEY,))
    rec = w.add(
        ProbeRecord(RAY_LOGS, "RolloutManager-err", Outcome.OK), data, suffix=".log"
    )
    w.finish()
    stored = (w.root / str(rec.artifact)).read_bytes()
    assert stored == tf.interleave_write(
        TQDM, at, b"\nlaunch: python train.py --wandb-key <redacted> --api-key <redacted>\n"
    )
    _assert_gone(w.root, API_KEY, WANDB_KEY)


def test_an_engine_body_with_invalid_utf8_keeps_the_api_key_out(tmp_path: Path) -> None:
    """/server_info echoes the engine's API key; one stray byte ahead of it in the body. The
    doctor's own --api-key and the pattern-caught admin key are blanked, the stray byte kept."""
    body = tf.set_json_path(SERVER_INFO, ("api_key",), API_KEY)
    body = tf.set_json_path(body, ("admin_api_key",), ADMIN_KEY)
    data = tf.insert_invalid_utf8(body.encode(), body.index('"model_path"'))
    w = BundleWriter(tmp_path / "b", command="test", known_secrets=(API_KEY,))
    rec = w.add(
        ProbeRecord(SGLANG, "http://127.0.0.1:15003/server_info", Outcome.OK), data
    )
    w.finish()
    stored = (w.root / str(rec.artifact)).read_bytes()
    assert stored == data.replace(API_KEY.encode(), b"<redacted>").replace(
        ADMIN_KEY.encode(), b"<redacted>"
    )
    assert b"\xff\xfe\x80" in stored and b'"model_path": "demo/model"' in stored
    _assert_gone(w.root, API_KEY, ADMIN_KEY)


def test_a_capped_http_body_ends_on_a_character_boundary() -> None:
    """The byte cap of every HTTP body (engine answers, Ray log tails) falling inside a
    character keeps the whole characters before it: the body stays UTF-8."""
    with http_stub({"/log": (200, TQDM, "text/plain", 0.0)}) as stub:
        for start in (100, 1000, 4000):
            cap = _cut_inside_a_character(TQDM, start)
            got = get(stub.url + "/log", {}, timeout=5, deadline=time.monotonic() + 5, max_body=cap)
            assert got.truncated and got.body == TQDM[: cap - 1]
            got.body.decode("utf-8")


@settings(max_examples=300, deadline=None)
@given(st.text(), st.integers(min_value=0, max_value=400))
def test_utf8_prefix_keeps_whole_characters_only(text: str, limit: int) -> None:
    """At most 3 bytes fewer than asked, never half a character, never more than asked."""
    data = text.encode("utf-8")
    cut = utf8_prefix(data, limit)
    assert data.startswith(cut) and min(limit, len(data)) - 3 <= len(cut) <= limit
    cut.decode("utf-8")


_NOT_ASCII = st.lists(st.integers(min_value=0x80, max_value=0xFF), max_size=64).map(bytes)


@settings(max_examples=300, deadline=None)
@given(_NOT_ASCII, _NOT_ASCII)
def test_redact_bytes_keeps_every_byte_around_a_secret(before: bytes, after: bytes) -> None:
    """Bytes that are not ASCII (UTF-8 or not, cut characters and stray bytes alike) around a
    known secret come back exactly; the secret does not."""
    data = before + b" " + API_KEY.encode() + b" " + after
    assert redact_bytes(data, (API_KEY,)) == before + b" " + REDACTED.encode() + b" " + after
