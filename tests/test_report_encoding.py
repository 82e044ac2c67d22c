"""The report encoder writes the bytes Go's encoding/json writes.

See docs/reference/neuron-monitor.md §Encoding and §Reference reports.
"""

from __future__ import annotations

import json
import random
import re
import struct
from decimal import Decimal
from pathlib import Path

import pytest

from neurontools.report.encoding import encode_report, encode_string, format_float

FIXTURES = Path(__file__).parent / "fixtures" / "report"


def test_real_idle_line_byte_for_byte() -> None:
    line = (FIXTURES / "spec_idle_line.json").read_text(encoding="utf-8").rstrip("\n")
    assert encode_report(json.loads(line)) == line


def test_illustrative_report_on_the_wire_prefix() -> None:
    report = json.loads((FIXTURES / "spec_illustrative_report.json").read_text(encoding="utf-8"))
    wire = encode_report(report)
    assert wire.startswith(
        '{"neuron_runtime_data":[{"pid":4242,"neuron_runtime_tag":"4242","error":"","report":'
        '{"execution_stats":{"period":1.000086123,"error_summary":{"generic":0,"numerical":0,'
    )
    assert "\n" not in wire and ": " not in wire and ", " not in wire
    assert json.loads(wire) == report
    # integral percentages stay integral, others keep their shortest form
    assert '"1":{"user":8,"nice":0,"system":4,"idle":88,' in wire
    assert '"neuroncore_utilization":87.42,"flops":41285734118912' in wire


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (100.0, "100"),
        (0.0, "0"),
        (-0.0, "-0"),
        (8.0, "8"),
        (-2.5, "-2.5"),
        (0.1, "0.1"),
        (0.1 + 0.2, "0.30000000000000004"),
        (1.000113182, "1.000113182"),
        (0.00047258, "0.00047258"),
        (89.01827638996558, "89.01827638996558"),
        (123456789.0, "123456789"),
        (41285734118912.0, "41285734118912"),
        (1e16, "10000000000000000"),
        (12345678901234567890.0, "12345678901234567000"),
        (1e20, "100000000000000000000"),
        (999999999999999900000.0, "999999999999999900000"),
        (1e21, "1e+21"),
        (2.5e25, "2.5e+25"),
        (1e100, "1e+100"),
        (1.7976931348623157e308, "1.7976931348623157e+308"),
        (1e-6, "0.000001"),
        (1.2345e-5, "0.000012345"),
        (1e-4, "0.0001"),
        (9.99e-7, "9.99e-7"),
        (1e-7, "1e-7"),
        (-1e-7, "-1e-7"),
        (1.5e-7, "1.5e-7"),
        (1e-10, "1e-10"),
        (1.25e-99, "1.25e-99"),
        (1e-100, "1e-100"),
        (5e-324, "5e-324"),
        (2.2250738585072014e-308, "2.2250738585072014e-308"),
    ],
)
def test_float_like_go(value: float, text: str) -> None:
    assert format_float(value) == text
    assert encode_report({"x": value}) == f'{{"x":{text}}}'


_GO_FLOAT = re.compile(r"-?(0|[1-9]\d*)(\.\d*[1-9])?(e[+-]\d+)?")


def test_random_floats_round_trip_in_go_notation() -> None:
    rng = random.Random(20260221)
    for _ in range(5000):
        value = struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0]
        if value != value or value in (float("inf"), float("-inf")):
            continue
        text = format_float(value)
        assert float(text) == value, text
        assert _GO_FLOAT.fullmatch(text), text
        magnitude = abs(value)
        assert ("e" in text) == (magnitude != 0 and (magnitude < 1e-6 or magnitude >= 1e21)), text
        if "e-" in text:
            assert not text.split("e-")[1].startswith("0"), text
    for _ in range(2000):  # percentages and periods: plain notation, the shortest digits (those of repr)
        value = rng.uniform(0, 100) * 10 ** rng.randint(-5, 19)
        text = format_float(value)
        assert "e" not in text and Decimal(text) == Decimal(repr(value)), (value, text)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_nan_and_infinity_are_refused(value: float) -> None:
    with pytest.raises(ValueError, match="unsupported value"):
        encode_report({"period": value})


@pytest.mark.parametrize(
    ("text", "encoded"),
    [
        ("", '""'),
        ("plain ascii 123", '"plain ascii 123"'),
        ('say "hi"', '"say \\"hi\\""'),
        ("back\\slash", '"back\\\\slash"'),
        ("a<b>c&d", '"a\\u003cb\\u003ec\\u0026d"'),
        ("line\u2028para\u2029", '"line\\u2028para\\u2029"'),
        ("\n\r\t\b\f", '"\\n\\r\\t\\b\\f"'),
        ("\x00\x01\x1b\x1f", '"\\u0000\\u0001\\u001b\\u001f"'),
        ("\x7f", '"\x7f"'),
        ("/tmp/neuroncc_compile_workdir/5c1d9e0a", '"/tmp/neuroncc_compile_workdir/5c1d9e0a"'),
        ("héllo wörld ✓ 日本", '"héllo wörld ✓ 日本"'),
        ("emoji \U0001f600", '"emoji \U0001f600"'),
        ("lone \ud800 surrogate", '"lone \\ufffd surrogate"'),
        ("open /proc/457402/stat: no such file or directory", '"open /proc/457402/stat: no such file or directory"'),
    ],
)
def test_strings_like_go(text: str, encoded: str) -> None:
    assert encode_string(text) == encoded


def test_scalars_containers_and_key_order() -> None:
    value = {
        "z": 1,
        "a": [True, False, None, -7, 2**63 - 1],
        "m": {},
        "l": [],
        "t": (1, 2.5),
        "<k>": "v",
        "p0": 1,
        "p1": 2,
        "p100": 3,
        "p25": 4,
    }
    assert encode_report(value) == (
        '{"z":1,"a":[true,false,null,-7,9223372036854775807],"m":{},"l":[],"t":[1,2.5],'
        '"\\u003ck\\u003e":"v","p0":1,"p1":2,"p100":3,"p25":4}'
    )


def test_bool_is_not_an_int_and_int_is_not_a_float() -> None:
    assert encode_report([True, 1, 1.0, 0, 0.0, False]) == "[true,1,1,0,0,false]"


def test_unsupported_values() -> None:
    with pytest.raises(TypeError, match="object keys must be strings"):
        encode_report({1: "x"})
    with pytest.raises(TypeError, match="unsupported type"):
        encode_report({"x": {1, 2}})
