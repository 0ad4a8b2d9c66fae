"""JSON text -> Python values for every parser: one decoder, one set of ParseError messages."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, TypeVar

from slime_hangdoctor.errors import ParseError

T = TypeVar("T")


def load_json(data: str | bytes, what: str, *, unit: str = "body") -> Any:
    """`data` decoded as UTF-8 JSON; ParseError naming `what` for anything else.

    `unit` names the thing in the message ("body" for an HTTP answer, "artefact" for a file a
    collector wrote). Covers invalid UTF-8, empty text, malformed JSON, an integer over CPython's
    4300-digit limit, and nesting deeper than the recursion limit."""
    if isinstance(data, bytes | bytearray | memoryview):
        try:
            data = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ParseError(
                f"{what}: {unit} is not UTF-8 ({exc.reason} at byte {exc.start})"
            ) from None
    if not isinstance(data, str):
        raise ParseError(f"{what}: expected bytes or str, got {type(data).__name__}")
    if not data.strip():
        raise ParseError(f"{what}: empty {unit}")
    try:
        return json.loads(data)
    except json.JSONDecodeError as exc:
        raise ParseError(
            f"{what}: not JSON ({exc.msg} at line {exc.lineno} col {exc.colno})"
        ) from None
    except ValueError as exc:  # e.g. an integer over CPython's 4300-digit limit
        raise ParseError(f"{what}: not usable JSON ({exc})"[:200]) from None
    except RecursionError:
        raise ParseError(f"{what}: JSON nested too deeply") from None


def load_json_object(data: str | bytes, what: str, *, unit: str = "body") -> Mapping[str, Any]:
    """`load_json`, and the value must be a JSON object."""
    doc = load_json(data, what, unit=unit)
    if not isinstance(doc, Mapping):
        raise ParseError(f"{what}: expected a JSON object")
    return doc


def json_field(
    obj: Mapping[str, Any], key: str, kind: type[T], where: str, *, required: bool = False
) -> T | None:
    """`obj[key]` where it is a `kind` (a JSON true or false is no int), None where it is absent
    or null; ParseError `<where> <key> is <type>, not <kind>` for another type, and `<where> has no
    <key>` for an absent one that is `required`."""
    value = obj.get(key)
    if value is None:
        if required:
            raise ParseError(f"{where} has no {key!r}")
        return None
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise ParseError(f"{where} {key!r} is {type(value).__name__}, not {kind.__name__}")
    return value


def meta_int(value: Any) -> int | None:
    """An integer of a record's meta (written by our collector, read leniently): None where a
    damaged bundle holds anything that is not one."""
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError, OverflowError):
        return None


def meta_str(value: Any) -> str | None:
    """A text of a record's meta, as text (None stays None)."""
    return str(value) if value is not None else None
