"""Error messages that stay one line whatever the user typed (docs/fuzzing.md).

A message that quotes input (an unknown flag, a file name, a key) would break over several lines,
or move the cursor about, if that input held a newline or another control character: those are
written as escapes instead (``\\n``, ``\\x1b``, ``\\u2028``). Printable text, tabs included, is
kept as it is.
"""

from __future__ import annotations

_ESCAPES = {c: f"\\x{c:02x}" for c in (*range(0x00, 0x09), *range(0x0A, 0x20), 0x7F, *range(0x80, 0xA0))}
_ESCAPES.update({ord("\n"): "\\n", ord("\r"): "\\r", 0x2028: "\\u2028", 0x2029: "\\u2029"})


def one_line(text: str) -> str:
    """``text`` with line breaks and control characters escaped."""
    return text.translate(_ESCAPES)
