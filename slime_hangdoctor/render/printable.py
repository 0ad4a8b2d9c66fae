"""Text from a bundle reaches a terminal as text, never as control sequences.

Frame names, log lines, reasons and URLs in a report come from the job and, for `analyse`, from a
bundle someone attached to a bug report. An ESC (or a C1 CSI, or a bidi override) in them would
move the cursor, retitle the window or hide text on the reader's terminal. Every control
character but newline and tab is shown as a visible `\\xNN` / `\\uNNNN` escape instead.
"""

from __future__ import annotations

import re

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
