"""Text from a bundle reaches a terminal as text, never as control sequences.

Frame names, log lines, reasons and URLs in a report come from the job and, for `analyse`, from a
bundle someone attached to a bug report. An ESC (or a C1 CSI, or a bidi override) in them would
move the cursor, retitle the window or hide text on the reader's terminal. Every control
character but newline and tab is shown as a visible `\\xNN` / `\\uNNNN` escape instead.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from slime_hangdoctor.verdict import Diagnosis

# C0 controls but \t and \n, DEL, C1 controls, and the bidi embedding/override/isolate marks.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """`text` with every control character escaped (newlines and tabs kept)."""
    if text.isprintable():
        return text
    return _CONTROL.sub(_escape, text)


def _escape(m: re.Match[str]) -> str:
    code = ord(m.group(0))
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable_diagnosis(diagnosis: Diagnosis) -> Diagnosis:
    """The diagnosis with every string in it made printable (before any layout: an escape is
    wider than the character it shows)."""
    cleaned = _clean(diagnosis)
    assert isinstance(cleaned, Diagnosis)
    return cleaned


def _clean(obj: Any) -> Any:
    if isinstance(obj, str):
        return printable(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {f.name: _clean(getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.init}
        return dataclasses.replace(obj, **changes)
    if isinstance(obj, tuple):
        return tuple(_clean(item) for item in obj)
    if isinstance(obj, list):
        return [_clean(item) for item in obj]
    if isinstance(obj, dict):
        return {_clean(k): _clean(v) for k, v in obj.items()}
    return obj
