"""A minimal protocol-buffers encoder (wire format only), so neurontools writes Perfetto traces
without a protobuf dependency: a message is the concatenation of its fields, each a key
``(field number << 3) | wire type`` followed by a varint, 8 bytes, or a length and bytes."""

from __future__ import annotations

import struct
from collections.abc import Iterable
from functools import cache, lru_cache

VARINT, FIXED64, LENGTH = 0, 1, 2
_ONE_BYTE = tuple(bytes((v,)) for v in range(0x80))  # the varints of 0..127, the most common
# the varints of 0..2**14-1, and of each 14-bit group when more groups follow (a trace's
# timestamps, ~2**61 ns since the epoch, are two such groups, then high bits shared by many)
_TWO_BYTES = tuple(bytes((v & 0x7F | 0x80, v >> 7)) for v in range(1 << 14))
_GROUP = tuple(bytes((v & 0x7F | 0x80, v >> 7 | 0x80)) for v in range(1 << 14))
_MASK = (1 << 14) - 1


def varint(value: int) -> bytes:
    """Base-128 varint; a negative ``int64`` is written as its 64-bit two's complement."""
    if 0 <= value < 0x80:
        return _ONE_BYTE[value]
    if 0 < value < 1 << 14:
        return _TWO_BYTES[value]
    if 1 << 28 <= value < 1 << 64:
        return _GROUP[value & _MASK] + _GROUP[value >> 14 & _MASK] + _high(value >> 28)
    return _varint(value)


@lru_cache(maxsize=4096)
def _high(value: int) -> bytes:
    return _varint(value)


def _varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


@cache
def key(number: int, wire: int) -> bytes:
    return varint(number << 3 | wire)


def uint(number: int, value: int) -> bytes:
    """An ``int32``/``int64``/``uint32``/``uint64``/``bool``/enum field."""
    return key(number, VARINT) + varint(int(value))


def fixed64(number: int, value: int) -> bytes:
    return key(number, FIXED64) + struct.pack("<Q", value & 0xFFFFFFFFFFFFFFFF)


def double(number: int, value: float) -> bytes:
    return key(number, FIXED64) + struct.pack("<d", value)


def raw(number: int, data: bytes) -> bytes:
    """A length-delimited field: a nested message or bytes."""
    return key(number, LENGTH) + varint(len(data)) + data


def string(number: int, value: str) -> bytes:
    return raw(number, value.encode("utf-8"))


def message(number: int, fields: Iterable[bytes]) -> bytes:
    return raw(number, b"".join(fields))
