"""Parsing of NEURON_RT_VISIBLE_CORES / NEURON_RT_NUM_CORES / LOCAL_RANK (no daemon needed)."""

from __future__ import annotations

import pytest

from emulator.runtime.core_spec import CoreSpecError, format_core_ids, parse_core_ids, request_from_env


@pytest.mark.parametrize(
    ("text", "ids"),
    [
        ("3", [3]),
        ("3-6", [3, 4, 5, 6]),
        ("3,4,5,6", [3, 4, 5, 6]),
        ("3-5,6", [3, 4, 5, 6]),
        (" 0 - 1 ", [0, 1]),
        ("7-7", [7]),
    ],
)
def test_valid_visible_cores(text: str, ids: list[int]) -> None:
    assert parse_core_ids(text) == ids


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("3,5,6", "contiguous and increasing (3 is followed by 5)"),
        ("4,3", "contiguous and increasing"),
        ("2-3,3", "contiguous and increasing"),
        ("5-2", "goes backwards"),
        ("", "is empty"),
        ("a", "not a core id"),
        ("1-", "not a core id"),
        ("-1", "not a core id"),
        ("1;2", "not a core id"),
    ],
)
def test_invalid_visible_cores(text: str, message: str) -> None:
    with pytest.raises(CoreSpecError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_core_ids(text)


def test_request_precedence() -> None:
    assert request_from_env({}).visible_cores is None and request_from_env({}).num_cores is None
    assert request_from_env({"NEURON_RT_NUM_CORES": "0"}).num_cores is None  # 0 = all
    assert request_from_env({"NEURON_RT_NUM_CORES": "4"}).num_cores == 4
    both = request_from_env({"NEURON_RT_NUM_CORES": "4", "NEURON_RT_VISIBLE_CORES": "2-3"})
    assert both.visible_cores == (2, 3) and both.num_cores is None
    assert request_from_env({"LOCAL_RANK": "3"}).visible_cores == (3,)
    assert request_from_env({"LOCAL_RANK": "1", "NEURON_RT_VISIBLE_CORES": "8-11"}).visible_cores == (9,)
    assert request_from_env({"LOCAL_RANK": "1", "NEURON_RT_VISIBLE_CORES": "5"}).visible_cores == (5,)
    with pytest.raises(CoreSpecError, match="has only 4 cores"):
        request_from_env({"LOCAL_RANK": "4", "NEURON_RT_VISIBLE_CORES": "8-11"})
    with pytest.raises(CoreSpecError, match="LOCAL_RANK"):
        request_from_env({"LOCAL_RANK": "x"})


def test_format_core_ids() -> None:
    assert format_core_ids([1]) == "nc1-nc1"
    assert format_core_ids([0, 1, 2]) == "nc0-nc2"
    assert format_core_ids([6, 0, 1]) == "nc0-nc1,nc6-nc6"
    assert format_core_ids([]) == "none"
