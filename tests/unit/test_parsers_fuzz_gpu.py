"""Fuzz the GPU/NCCL/stack parsers with mutations of real fixtures.

Each parser must either return its fact type or raise ParseError: never KeyError, TypeError,
UnicodeDecodeError, RecursionError, ... Mutations are the named transformations of
tests/fixtures/transforms/ (truncation, byte flips, invalid UTF-8, a JSON value replaced).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slime_hangdoctor.errors import ParseError
from slime_hangdoctor.facts import GpuSeries
from slime_hangdoctor.parsers.flight_recorder import FrDump, parse_flight_recorder
from slime_hangdoctor.parsers.nccl_ras import RasReport, parse_ras
from slime_hangdoctor.parsers.nvml import GpmReading, parse_gpm, parse_nvml_series
from slime_hangdoctor.parsers.pyspy import ProcessStack, parse_pyspy_json, parse_pyspy_text
from tests.fixtures import transforms as tf

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
NCCL = REAL / "gpu-2xh200-nccl-broadcast-hang"
RAY = REAL / "gpu-2xh200-ray-nccl-hang"
GLOO = REAL / "local-cpu-gloo-broadcast-hang"

FUZZ = settings(
    max_examples=int(os.environ.get("HANGDOCTOR_FUZZ_EXAMPLES", "150")),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


@cache
def _pyspy_json_sources() -> tuple[str, ...]:
    out = [_text(GLOO / "json_native0.txt")]
    for name in ("run3_hang", "run3_train_stuck", "run3_matmul"):
        text = _text(NCCL / f"{name}.pyspy.json.txt")
        out += [s.body for s in tf.split_capture_sections(text)]
    return tuple(out)


@cache
def _pyspy_text_sources() -> tuple[str, ...]:
    paths = [
        NCCL / "run1_hang_stacks.txt",
        NCCL / "run3_hang.pyspy.native.txt",
        RAY / "hang" / "pyspy.txt",
        GLOO / "native0.txt",
    ]
    return tuple(_text(p) for p in paths)


@cache
def _nvml_sources() -> tuple[str, ...]:
    names = [NCCL / "run3_hang.nvml.json", NCCL / "run1_idle.json", RAY / "hang" / "nvml.json"]
    return tuple(_text(p) for p in names)


@cache
def _gpm_sources() -> tuple[str, ...]:
    return tuple(_text(NCCL / n) for n in ("run2_gpm_busy.json", "run3_matmul.gpm.json"))


@cache
def _ras_sources() -> tuple[str, ...]:
    names = ["run3_hang.ras.json", "run2_ras_hang_peerkilled_6s.json", "run2_ras_nojob.json"]
    paths = [NCCL / n for n in names] + [RAY / "hang" / "ras.json"]
    # drop the trailing `time` output some real files carry, so JSON paths can be rewritten
    return tuple(tf.ras_map_part(_text(p), "text", lambda part: part) for p in paths)


@cache
def _ras_json_body() -> str:
    body: str = json.loads(_ras_sources()[0])["json"]["body"]
    return body


@cache
def _fr_sources() -> tuple[bytes, ...]:
    names = [
        "run3_hang.fr.fr_hang_rank_0.pkl",
        "run3_hang.fr.fr_hang_rank_1.pkl",
        "run3_train_stuck.fr.fr_train_stuck_rank_0.pkl",
    ]
    return tuple((NCCL / n).read_bytes() for n in names)


@cache
def _paths(text: str) -> tuple[tf.JsonPath, ...]:
    return tuple(tf.json_paths(text))


# --------------------------------------------------------------------------- strategies

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.just(10**400)
    | st.floats(allow_nan=False)
    | st.text(max_size=12)
    | st.just("ERR NVMLError_NotSupported: Not Supported"),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)

PLAIN_VALUES = JSON_VALUES | st.binary(max_size=8) | st.tuples(st.integers(), st.text(max_size=4))


@st.composite
def _mutated_bytes(draw: st.DrawFn, sources: tuple[bytes, ...]) -> bytes:
    data = draw(st.sampled_from(sources))
    ops = st.sampled_from(["truncate", "flip", "utf8", "digits"])
    for op in draw(st.lists(ops, min_size=1, max_size=3)):
        if op == "truncate":
            data = tf.truncate_bytes_at(data, draw(st.integers(0, len(data))))
        elif op == "flip":
            index = draw(st.integers(0, max(len(data) - 1, 0)))
            data = tf.flip_byte(data, index, draw(st.integers(1, 255)))
        elif op == "utf8":
            data = tf.insert_invalid_utf8(data, draw(st.integers(0, len(data))))
        else:
            n = draw(st.sampled_from([400, 5000]))
            data = tf.insert_digits(data, draw(st.integers(0, len(data))), n)
    return data


def _mutated_text(sources: Callable[[], tuple[str, ...]]) -> st.SearchStrategy[str]:
    encoded = st.builds(lambda: tuple(s.encode("utf-8") for s in sources()))
    return encoded.flatmap(_mutated_bytes).map(tf.decode_like_loader)


@st.composite
def _json_value_replaced(draw: st.DrawFn, sources: tuple[str, ...]) -> str:
    text = draw(st.sampled_from(sources))
    path = draw(st.sampled_from(_paths(text)))
    return tf.set_json_path(text, path, draw(JSON_VALUES))


def _json_mutation(sources: Callable[[], tuple[str, ...]]) -> st.SearchStrategy[str]:
    return st.builds(sources).flatmap(_json_value_replaced)


def _either_or_parse_error(parse: Callable[[Any], object], arg: Any, fact: type) -> None:
    try:
        result = parse(arg)
    except ParseError:
        return
    items = result if isinstance(result, tuple) else (result,)
    assert all(isinstance(item, fact) for item in items), result


# --------------------------------------------------------------------------- py-spy


@FUZZ
@given(st.one_of(_mutated_text(_pyspy_json_sources), _json_mutation(_pyspy_json_sources)))
def test_fuzz_pyspy_json(text: str) -> None:
    _either_or_parse_error(parse_pyspy_json, text, ProcessStack)


@FUZZ
@given(_mutated_text(_pyspy_text_sources))
def test_fuzz_pyspy_text(text: str) -> None:
    _either_or_parse_error(parse_pyspy_text, text, ProcessStack)


# --------------------------------------------------------------------------- NVML / GPM


@FUZZ
@given(st.one_of(_mutated_text(_nvml_sources), _json_mutation(_nvml_sources)))
def test_fuzz_nvml_series(text: str) -> None:
    _either_or_parse_error(parse_nvml_series, text, GpuSeries)


@FUZZ
@given(st.one_of(_mutated_text(_gpm_sources), _json_mutation(_gpm_sources)))
def test_fuzz_gpm(text: str) -> None:
    _either_or_parse_error(parse_gpm, text, GpmReading)


# --------------------------------------------------------------------------- NCCL RAS


@st.composite
def _ras_body_mutation(draw: st.DrawFn) -> str:
    """The run3 hang artefact with one value of its JSON answer replaced, or its body mangled."""
    body = _ras_json_body()
    if draw(st.booleans()):
        body = tf.set_json_path(body, draw(st.sampled_from(_paths(body))), draw(JSON_VALUES))
    else:
        raw = draw(_mutated_bytes((body.encode("utf-8"),)))
        body = tf.decode_like_loader(raw)
    keep_text = draw(st.booleans())
    artefact = tf.ras_map_part(_ras_sources()[0], "json", lambda p: {**p, "body": body})
    return artefact if keep_text else tf.ras_drop_part(artefact, "text")


@FUZZ
@given(st.one_of(_mutated_text(_ras_sources), _json_mutation(_ras_sources), _ras_body_mutation()))
def test_fuzz_ras(text: str) -> None:
    _either_or_parse_error(parse_ras, text, RasReport)


# --------------------------------------------------------------------------- flight recorder


@st.composite
def _fr_field_mutation(draw: st.DrawFn) -> bytes:
    data = draw(st.sampled_from(_fr_sources()))
    value = draw(PLAIN_VALUES)
    if draw(st.booleans()):
        key = draw(
            st.sampled_from(
                ["record_id", "pg_id", "collective_seq_id", "profiling_name", "state", "frames"]
                + ["input_sizes", "is_p2p"]
            )
        )
        return tf.fr_set_entry_field(data, key, value)
    top = draw(st.sampled_from(["version", "entries", "pg_status", "pg_config"]))
    return tf.fr_redump(data, lambda doc: doc.__setitem__(top, value))


@FUZZ
@given(st.one_of(st.builds(_fr_sources).flatmap(_mutated_bytes), _fr_field_mutation()))
def test_fuzz_flight_recorder(data: bytes) -> None:
    _either_or_parse_error(lambda d: parse_flight_recorder(d, 0), data, FrDump)
