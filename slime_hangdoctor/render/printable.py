"""Text from a bundle reaches a terminal as text, never as control sequences.

Frame names, log lines, reasons and URLs in a report come from the job and, for `analyse`, from a
bundle someone attached to a bug report. An ESC (or a C1 CSI, or a bidi override) in them would
move the cursor, retitle the window or hide text on the reader's terminal; a line or paragraph
separator (U+2028, U+2029) breaks a one-line status where a terminal or log viewer honours it; a
format character (zero-width U+200B, the Arabic letter mark U+061C, bidi marks) hides or reorders
text. Every character that `str.isprintable` refuses (Unicode categories Cc, Cf, Cs, Co, Cn, Zl,
Zp, and Zs but the space) except newline and tab is shown as a visible `\\xNN` / `\\uNNNN` /
`\\UNNNNNNNN` escape instead; `one_line` escapes newline and tab too. So are the few characters
Python calls printable that show nothing (`INVISIBLE`: Hangul fillers, the blank Braille pattern,
the combining grapheme joiner, variation selectors), with which a text can hide or smuggle words.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from enum import Enum
from typing import Any

from slime_hangdoctor.verdict import Diagnosis

# Printable to Python (letters, symbols, combining marks), yet nothing is drawn for them.
INVISIBLE = re.compile(
    "[\u115f\u1160\u3164\uffa0"  # Hangul fillers (choseong, jungseong, compatibility, halfwidth)
    "\u2800"  # Braille pattern blank
    "\u034f"  # combining grapheme joiner
    "\u17b4\u17b5"  # Khmer inherent vowels
    "\u180b-\u180d\u180f"  # Mongolian free variation selectors
    "\ufe00-\ufe0f\U000e0100-\U000e01ef]"  # variation selectors (a byte each, if smuggled)
)


def printable(text: str, keep: str = "\n\t") -> str:
    """`text` with every non-printable or invisible character but those in `keep` escaped."""
    if text.isprintable() and not INVISIBLE.search(text):
        return text
    plain = text
    for c in keep:
        plain = plain.replace(c, "")
    if plain.isprintable() and not INVISIBLE.search(plain):
        return text
    return "".join(
        c if (c.isprintable() and not INVISIBLE.match(c)) or c in keep else _escape(c) for c in text
    )


def one_line(text: str) -> str:
    """`text` as one printable line: newlines and tabs escaped too (a status line, a log line)."""
    return printable(text, keep="")


def _escape(c: str) -> str:
    code = ord(c)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable_diagnosis(diagnosis: Diagnosis) -> Diagnosis:
    """The diagnosis with every string in it made printable (before any layout: an escape is
    wider than the character it shows)."""
    return map_strings(diagnosis, printable)


def map_strings(diagnosis: Diagnosis, change: Callable[[str], str]) -> Diagnosis:
    """The diagnosis with `change` applied to every string in it (keys of `extra` too)."""
    cleaned = _clean(diagnosis, change)
    assert isinstance(cleaned, Diagnosis)
    return cleaned


def _clean(obj: Any, change: Callable[[str], str]) -> Any:
    if isinstance(obj, Enum):  # (a str Enum is a value of the contract, never text to change)
        return obj
    if isinstance(obj, str):
        return change(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {
            f.name: _clean(getattr(obj, f.name), change) for f in dataclasses.fields(obj) if f.init
        }
        return dataclasses.replace(obj, **changes)
    if isinstance(obj, tuple):
        return tuple(_clean(item, change) for item in obj)
    if isinstance(obj, list):
        return [_clean(item, change) for item in obj]
    if isinstance(obj, dict):
        return {_clean(k, change): _clean(v, change) for k, v in obj.items()}
    return obj
