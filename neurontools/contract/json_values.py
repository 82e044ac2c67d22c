"""Names and checks of decoded JSON values, shared by every reader of a JSON document.

Two families, one vocabulary:

* strict checks (``expect_object``, ``expect_array``, ``expect_number``) raise the caller's error
  class with ``"<where>: expected <what>, got <value>"``, the one-line form every tool prints
  (the snapshot's typed models word their errors the same way: neurontools/contract/validation.py);
* lenient readers (``object_or_none``, ``number_or_none``, ``integer_or_none``, ``index_or_none``)
  answer None for anything unusable, for documents read as "show what can be shown"
  (a neuron-monitor report from any 2.x version, docs/reference/neuron-top.md).

JSON's types are Python's after ``json.loads``: a boolean is never a number here, although
``bool`` is an ``int`` subclass. Plain functions, no third-party imports: cheap to import from
any command-line tool.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NoReturn

_KINDS: dict[type, str] = {
    bool: "boolean",
    int: "number",
    float: "number",
    str: "string",
    list: "array",
    dict: "object",
}
_ARTICLES = {"array": "an array", "object": "an object", "null": "null"}


def json_kind(value: Any) -> str:
    """The JSON type of a decoded value: null, boolean, number, string, array or object (else
    the Python type's name)."""
    if value is None:
        return "null"
    kind = _KINDS.get(type(value))
    if kind is not None:
        return kind
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def json_type_name(value: Any) -> str:
    """How a JSON value is named in error messages ('a string', 'an array', 'null' ...)."""
    kind = json_kind(value)
    return _ARTICLES.get(kind) or f"a {kind}"


def describe(value: Any) -> str:
    """A value as error messages show it: a scalar as itself (``'x'``, ``1.5``, ``True``), a
    container by its type (``an object``), so a message stays one short line."""
    if isinstance(value, int | float | str | bool):
        return repr(value)
    return json_type_name(value)


def is_number(value: Any) -> bool:
    """An int or a float, not a boolean."""
    kind = type(value)
    return kind is float or kind is int or (isinstance(value, int | float) and not isinstance(value, bool))


def is_object(value: Any) -> bool:
    return type(value) is dict or isinstance(value, Mapping)  # what JSON gives is a dict: skip the ABC check


# -- strict: raise the caller's error naming where ----------------------------------------------------


def fail(error: type[Exception], where: str, expected: str, value: Any) -> NoReturn:
    """Raise ``error("<where>: expected <expected>, got <value>")``."""
    raise error(f"{where}: expected {expected}, got {describe(value)}")


def expect_object(value: Any, where: str, error: type[Exception] = ValueError) -> Mapping[str, Any]:
    if not is_object(value):
        fail(error, where, "an object", value)
    return value


def expect_array(value: Any, where: str, error: type[Exception] = ValueError) -> list[Any]:
    if not isinstance(value, list):
        fail(error, where, "an array", value)
    return value


def expect_number(value: Any, where: str, error: type[Exception] = ValueError) -> float:
    if not is_number(value):
        fail(error, where, "a number", value)
    return float(value)


# -- lenient: None for what cannot be used ----------------------------------------------------------


def object_or_none(value: Any) -> Mapping[str, Any] | None:
    return value if type(value) is dict or isinstance(value, Mapping) else None  # (is_object, inlined: hot)


def number_or_none(value: Any, bound: int) -> float | None:
    """A finite number as a float (an int only below ``bound`` in magnitude: beyond any counter);
    None for anything else (missing, not a number, NaN, infinite)."""
    kind = type(value)
    if kind is not float and kind is not int:
        if not is_number(value):
            return None
        value = float(value) if isinstance(value, float) else int(value)
    if isinstance(value, int):
        return float(value) if -bound < value < bound else None
    return value if math.isfinite(value) else None


def integer_or_none(value: Any, bound: int) -> int | None:
    """An integer (or an integral float) below ``bound`` in magnitude; None for anything else."""
    if type(value) is int:
        return value if -bound < value < bound else None
    number = number_or_none(value, bound)
    return int(number) if number is not None and number.is_integer() else None


def index_or_none(key: Any, max_digits: int) -> int | None:
    """An object key that is a decimal index (ASCII digits only, at most ``max_digits``), as an int."""
    if isinstance(key, str) and key.isascii() and key.isdigit() and len(key) <= max_digits:
        return int(key)
    return None
