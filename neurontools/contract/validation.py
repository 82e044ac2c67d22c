"""One strict validation path for the JSON documents the tools read: pydantic over frozen dataclasses.

A document's shape is written once, as frozen dataclasses whose field types say what JSON must
hold: ``Number``, ``Integer``, ``Text``, ``Flag``; objects keyed by indices (``index_key``,
``IndexKeyed``); fixed-length arrays (``FixedArray``, e.g. the snapshot's latencies); plain
dataclasses defined elsewhere (``StrictFields``). ``JsonValidator`` validates a decoded document
into them, writes them back as JSON and gives their JSON schema (the daemon's OpenAPI document,
docs/snapshot.md). Another document (a configuration file, say) can be typed the same way and
read through its own ``JsonValidator(Type, "<root>", ItsError)``.

Strict as JSON is: a boolean is not a number, ``"1"`` is not an integer, an integer field also
takes an integral float (``12.0``, as some encoders write counters), object keys that are indices
are decimal digits only. Unknown keys are ignored, so a newer writer can add fields. A failure
raises the caller's error class with one line naming the first bad key as the tools print it:
``snapshot.processes[0].cores['1'].busy: expected a number, got 'x'`` (the wording of
neurontools/contract/json_values.py, which hand-written readers use).

``Reusable`` fields take over the previous document's objects when their JSON did not change
(``SectionMemo``): comparing JSON is several times cheaper than validating it, and consumers
can tell "unchanged" by identity.
"""

from __future__ import annotations

import dataclasses
import types
from collections import Counter
from collections.abc import Callable, Hashable, Mapping
from functools import cached_property
from typing import Annotated, Any, Generic, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler, TypeAdapter, ValidationError
from pydantic_core import core_schema as cs

from neurontools.contract.json_values import describe

T = TypeVar("T")

JSON_ERROR = "json"  # the error type of every JsonType; its message is what was expected


class JsonType:
    """``Annotated`` metadata: one JSON value, validated strictly; ``expected`` names it in errors."""

    __slots__ = ("_schema", "expected", "json_schema")

    def __init__(self, expected: str, schema: Callable[[], cs.CoreSchema], json_schema: Mapping[str, Any]) -> None:
        self.expected = expected
        self.json_schema = dict(json_schema)
        self._schema = schema

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> cs.CoreSchema:
        return cs.custom_error_schema(self._schema(), custom_error_type=JSON_ERROR, custom_error_message=self.expected)

    def __get_pydantic_json_schema__(self, schema: cs.CoreSchema, handler: GetJsonSchemaHandler) -> dict[str, Any]:
        return dict(self.json_schema)

    def __repr__(self) -> str:
        return f"JsonType({self.expected!r})"


def _integral(value: float) -> int:
    if not value.is_integer():
        raise ValueError("not integral")
    return int(value)


NUMBER = JsonType("a number", lambda: cs.float_schema(strict=True), {"type": "number"})
INTEGER = JsonType(
    "an integer",
    lambda: cs.union_schema(
        [cs.int_schema(strict=True), cs.no_info_after_validator_function(_integral, cs.float_schema(strict=True))],
        mode="left_to_right",
    ),
    {"type": "integer"},
)
TEXT = JsonType("a string", lambda: cs.str_schema(strict=True), {"type": "string"})
FLAG = JsonType("a boolean", lambda: cs.bool_schema(strict=True), {"type": "boolean"})
INDEX_PATTERN = r"^[0-9]+$"


def index_key(noun: str) -> JsonType:
    """An object key that is a decimal index (``"0"``), as an int; ``noun`` names it in errors."""
    return JsonType(
        noun,
        lambda: cs.chain_schema([cs.str_schema(strict=True, pattern=INDEX_PATTERN), cs.int_schema()]),
        {"type": "string", "pattern": INDEX_PATTERN},
    )


Number = Annotated[float, NUMBER]  # an int or a float (not a boolean), as a float
Integer = Annotated[int, INTEGER]  # an int, or an integral float, as an int
Text = Annotated[str, TEXT]
Flag = Annotated[bool, FLAG]
_STRICT: dict[Any, Any] = {float: Number, int: Integer, str: Text, bool: Flag}


class FixedArray:
    """``Annotated`` metadata: a JSON array of fixed length whose items are ``items`` (e.g.
    ``(Number, Number, Number)``), held in Python as ``make(validated items)`` and written back
    as ``flat(value)`` (default: the value itself, a tuple). ``shape`` names it in errors:
    ``expected [end, total, device], got an array``."""

    __slots__ = ("flat", "items", "make", "shape")

    def __init__(
        self,
        shape: str,
        items: tuple[Any, ...],
        make: Callable[[tuple[Any, ...]], Any],
        flat: Callable[[Any], tuple[Any, ...]] | None = None,
    ) -> None:
        self.shape, self.items, self.make, self.flat = shape, items, make, flat

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> cs.CoreSchema:
        array = cs.tuple_schema([handler.generate_schema(item) for item in self.items])
        written = None if self.flat is None else cs.plain_serializer_function_ser_schema(self.flat, return_schema=array)
        return cs.no_info_after_validator_function(self.make, array, serialization=written)

    def __repr__(self) -> str:
        return f"FixedArray({self.shape!r})"


def _sorted_keys(value: dict[Any, T]) -> dict[Any, T]:
    return dict(sorted(value.items()))


class IndexKeyed:
    """``Annotated`` metadata of an object whose keys are indices (``dict[<index_key>, T]``): in
    index order once validated; its JSON schema allows no other keys."""

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> cs.CoreSchema:
        return cs.no_info_after_validator_function(_sorted_keys, handler(source))

    def __get_pydantic_json_schema__(self, schema: cs.CoreSchema, handler: GetJsonSchemaHandler) -> dict[str, Any]:
        return {**handler(schema), "additionalProperties": False}


class StrictFields:
    """``Annotated`` metadata for a plain dataclass defined without pydantic (e.g. in
    neurontools/contract/inventory.py): its ``str``/``int``/``float``/``bool`` fields validated as
    ``Text``/``Integer``/``Number``/``Flag``."""

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> cs.CoreSchema:
        hints = get_type_hints(source)
        fields = dataclasses.fields(source)
        args = [cs.dataclass_field(f.name, handler.generate_schema(_STRICT[hints[f.name]])) for f in fields]
        return cs.dataclass_schema(
            source,
            cs.dataclass_args_schema(source.__name__, args),
            [f.name for f in fields],
            frozen=source.__dataclass_params__.frozen,
        )


# -- reusing unchanged sections ---------------------------------------------------------------------


class SectionMemo:
    """What validating one document may take over from the previous one: per (key, section)
    the section's JSON and what it validated to. ``parsed`` counts the sections validated anew."""

    def __init__(self, previous: SectionMemo | None = None) -> None:
        self._previous = previous._kept if previous is not None else {}
        self._kept: dict[tuple[Hashable, str], tuple[Any, Any]] = {}
        self.parsed: Counter[str] = Counter()

    def section(self, key: Hashable, name: str, raw: Any, parse: Callable[[Any], T]) -> T:
        """``parse(raw)``, or the previous document's result when its JSON was equal (equal JSON
        validated without error before)."""
        known = self._previous.get((key, name))
        if known is not None and known[0] == raw:
            result = known[1]
        else:
            result = parse(raw)
            self.parsed[name] += 1
        self._kept[(key, name)] = (raw, result)
        return result


class Reusable:
    """``Annotated`` metadata of a field whose value is taken over from the previous document when
    its JSON did not change; the validation context is the ``SectionMemo`` (none: always validated).
    ``key``: the field, validated before this one, that identifies the enclosing object (a PID)."""

    __slots__ = ("key",)

    def __init__(self, key: str) -> None:
        self.key = key

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> cs.CoreSchema:
        key = self.key

        def reuse(raw: Any, validate: cs.ValidatorFunctionWrapHandler, info: cs.ValidationInfo) -> Any:
            memo = info.context
            if memo is None:
                return validate(raw)
            return memo.section(info.data.get(key), info.field_name, raw, validate)

        return cs.with_info_wrap_validator_function(reuse, handler(source))


# -- one validation path ----------------------------------------------------------------------------


class JsonValidator(Generic[T]):
    """Validate decoded JSON into ``tp`` (errors: ``error`` naming the key below ``root``), write
    ``tp`` as JSON, describe it as JSON schema."""

    def __init__(self, tp: Any, root: str, error: type[Exception]) -> None:
        self.type, self.root, self.error = tp, root, error

    @cached_property
    def adapter(self) -> TypeAdapter[T]:
        """Made on first use: building the validator takes a while, importing the types must not."""
        return TypeAdapter(self.type)

    def validate(self, data: Any, memo: SectionMemo | None = None) -> T:
        try:
            return self.adapter.validate_python(data, context=memo)
        except ValidationError as exc:
            raise self.error(explain(exc, self.type, self.root)) from None

    def dump_json(self, value: T) -> bytes:
        return self.adapter.dump_json(value)

    def dump(self, value: T) -> Any:
        """``value`` as decoded JSON (what ``json.loads(dump_json(value))`` gives)."""
        return self.adapter.dump_python(value, mode="json")


# -- errors as the tools print them ---------------------------------------------------------------

_OBJECT_ERRORS = frozenset({"dict_type", "mapping_type", "dataclass_type", "dataclass_exact_type", "model_type"})
_ARRAY_ERRORS = frozenset({"list_type", "tuple_type", "iterable_type", "too_short", "too_long"})


def explain(exc: ValidationError, root_type: Any, root: str) -> str:
    """The first error of ``exc`` in one line, its place written from ``root`` down."""
    error = exc.errors(include_url=False)[0]
    kind, loc, value = error["type"], error["loc"], error.get("input")
    if loc and loc[-1] == "[key]":
        where, _ = _walk(root_type, root, loc[:-2])
        noun = error["msg"] if kind == JSON_ERROR else "valid"
        return f"{where}: key {loc[-2]!r} is not {noun}"
    if kind == "missing":
        where, tp = _walk(root_type, root, loc[:-1])
        if isinstance(loc[-1], int):  # an array shorter than its fixed length
            return f"{where}: expected {_shape(tp) or f'at least {loc[-1] + 1} items'}, got {describe(value)}"
        return f"{where}: missing key {loc[-1]!r}"
    where, tp = _walk(root_type, root, loc)
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        name = str(error["ctx"]["discriminator"]).strip("'")
        if kind == "union_tag_not_found" or not isinstance(value, Mapping) or name not in value:
            return f"{where}: missing key {name!r}"
        return f"{where}.{name}: expected one of {', '.join(_tags(tp))}, got {describe(value[name])}"
    if kind == JSON_ERROR:
        return f"{where}: expected {error['msg']}, got {describe(value)}"
    if kind == "literal_error" and get_origin(_bare(tp)) is Literal:
        allowed = [str(v) for v in get_args(_bare(tp))]
        expected = allowed[0] if len(allowed) == 1 else f"one of {', '.join(allowed)}"
        return f"{where}: expected {expected}, got {describe(value)}"
    shape = _shape(tp)
    if shape is not None and (kind in _ARRAY_ERRORS or kind in _OBJECT_ERRORS):
        return f"{where}: expected {shape}, got {describe(value)}"
    if kind in _OBJECT_ERRORS:
        return f"{where}: expected an object, got {describe(value)}"
    if kind in ("list_type", "tuple_type", "iterable_type"):
        return f"{where}: expected an array, got {describe(value)}"
    return f"{where}: {error['msg']}"


def _bare(tp: Any) -> Any:
    """``tp`` without ``Annotated`` and without ``None`` from an optional."""
    while True:
        origin = get_origin(tp)
        if origin is Annotated:
            tp = get_args(tp)[0]
        elif origin in (Union, types.UnionType) and type(None) in get_args(tp):
            rest = [a for a in get_args(tp) if a is not type(None)]
            tp = rest[0] if len(rest) == 1 else Union[tuple(rest)]  # noqa: UP007 (a runtime Union of types)
        else:
            return tp


def _hints(tp: Any) -> dict[str, Any]:
    try:
        return get_type_hints(tp, include_extras=True)
    except (NameError, TypeError):
        return {}


def _tag_values(member: Any) -> tuple[Any, ...]:
    return tuple(v for hint in _hints(_bare(member)).values() if get_origin(hint) is Literal for v in get_args(hint))


def _tags(union: Any) -> list[str]:
    return [str(v) for member in get_args(_bare(union)) for v in _tag_values(member)]


def _step(tp: Any, key: Any) -> tuple[str, Any]:
    """The text one ``loc`` element adds to a place, and the type found there."""
    tp = _bare(tp)
    origin, args = get_origin(tp), get_args(tp)
    if dataclasses.is_dataclass(tp) and isinstance(key, str):
        return f".{key}", _hints(tp).get(key, Any)
    if origin in (Union, types.UnionType):  # a tagged union: the element is the tag, not a place
        member = next((m for m in args if key in _tag_values(m)), Any)
        return "", member
    if isinstance(tp, type) and issubclass(tp, tuple) and hasattr(tp, "_fields") and isinstance(key, int):
        hints = _hints(tp)
        return f"[{key}]", hints.get(tp._fields[key], Any) if 0 <= key < len(tp._fields) else Any
    if isinstance(key, int):
        if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
            return f"[{key}]", args[0]
        if origin is tuple and 0 <= key < len(args):
            return f"[{key}]", args[key]
        return f"[{key}]", args[0] if origin is list and args else Any
    return f"[{key!r}]", args[1] if origin in (dict, Mapping) and len(args) == 2 else Any


def _walk(tp: Any, root: str, loc: tuple[Any, ...]) -> tuple[str, Any]:
    where = root
    for key in loc:
        text, tp = _step(tp, key)
        where += text
    return where, tp


def _shape(tp: Any) -> str | None:
    """How a fixed-length array is named in errors (``[end, total, device]``), if ``tp`` is one."""
    while get_origin(tp) is Annotated:
        for meta in get_args(tp)[1:]:
            if isinstance(meta, FixedArray):
                return meta.shape
        tp = get_args(tp)[0]
    return None
