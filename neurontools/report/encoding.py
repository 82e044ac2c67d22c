"""JSON encoding byte-identical to the real neuron-monitor (a Go program using ``encoding/json``).

What Go does, and therefore what this module does:

* compact: no spaces after ``,`` and ``:``; object keys in insertion order (the builder emits the
  real tool's struct order; Go sorts map keys, the builder does that where the real tool has maps);
* float64: the shortest decimal that reads back as the same float, plain notation for magnitudes in
  [1e-6, 1e21) (``100.0`` -> ``100``, ``0.5`` -> ``0.5``), exponent notation outside it with a
  sign and no zero padding for negative exponents (``1e-7``, ``1.5e-10``, ``1e+21``); NaN and
  infinities cannot be encoded (Go refuses them too);
* strings: ``"`` and ``\\`` backslash-escaped, ``\\b \\f \\n \\r \\t`` short escapes (Go 1.22+),
  other control characters as ``\\u00XX`` (lowercase hex), ``<``, ``>``, ``&``, U+2028 and U+2029
  as ``\\u003c`` ``\\u003e`` ``\\u0026`` ``\\u2028`` ``\\u2029`` (HTML-safe, Go's default),
  everything else as raw UTF-8; lone surrogates (invalid UTF-8 in Go) become ``\\ufffd``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

_NEEDS_ESCAPE = re.compile('[\x00-\x1f"\\\\<>&\u2028\u2029\ud800-\udfff]')
_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_char(match: re.Match[str]) -> str:
    ch = match.group()
    short = _SHORT_ESCAPES.get(ch)
    if short is not None:
        return short
    code = ord(ch)
    if 0xD800 <= code <= 0xDFFF:
        return "\\ufffd"
    return f"\\u{code:04x}"


def encode_string(text: str) -> str:
    """``text`` as a JSON string literal, escaped like Go's ``encoding/json``."""
    if _NEEDS_ESCAPE.search(text) is None:
        return f'"{text}"'
    return '"' + _NEEDS_ESCAPE.sub(_escape_char, text) + '"'


def _shortest_digits(value: float) -> tuple[str, int]:
    """Digits ``d`` and decimal point position ``p`` with ``abs(value) == 0.d * 10**p``, shortest round trip."""
    mantissa, _, exponent = repr(abs(value)).partition("e")
    whole, _, frac = mantissa.partition(".")
    digits = whole + frac
    point = len(whole) + (int(exponent) if exponent else 0)
    stripped = digits.lstrip("0")
    point -= len(digits) - len(stripped)
    return stripped.rstrip("0"), point


def format_float(value: float) -> str:
    """A float64 as Go's ``encoding/json`` writes it (ES6 number-to-string rules)."""
    if math.isnan(value) or math.isinf(value):
        raise ValueError(f"json: unsupported value: {value!r}")
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    sign = "-" if value < 0 else ""
    digits, point = _shortest_digits(value)
    magnitude = abs(value)
    if 1e-6 <= magnitude < 1e21:
        if point <= 0:
            return f"{sign}0.{'0' * -point}{digits}"
        if point >= len(digits):
            return sign + digits + "0" * (point - len(digits))
        return f"{sign}{digits[:point]}.{digits[point:]}"
    exponent = point - 1
    mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    exp_text = f"-{-exponent}" if exponent < 0 else f"+{exponent:02d}"
    return f"{sign}{mantissa}e{exp_text}"


def _encode(value: Any, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, str):
        out.append(encode_string(value))
    elif isinstance(value, int):
        out.append(str(int(value)))
    elif isinstance(value, float):
        out.append(format_float(value))
    elif isinstance(value, Mapping):
        out.append("{")
        first = True
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"json: object keys must be strings, got {key!r}")
            if not first:
                out.append(",")
            first = False
            out.append(encode_string(key))
            out.append(":")
            _encode(item, out)
        out.append("}")
    elif isinstance(value, list | tuple):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _encode(item, out)
        out.append("]")
    else:
        raise TypeError(f"json: unsupported type: {type(value).__name__}")


def encode_report(report: Any) -> str:
    """One report as one compact JSON text (no trailing newline), bytes as the real tool writes them."""
    out: list[str] = []
    _encode(report, out)
    return "".join(out)
