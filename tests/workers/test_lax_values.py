"""workers/lax_values.py: pydantic's lax coercions, checked against what pydantic does."""

from __future__ import annotations

from typing import Any

import pytest

from workers.lax_values import lax_bool, lax_float, lax_int

# (value, pydantic's lax int, pydantic's lax bool), None where it refuses: read from
# pydantic 2 (vLLM's request models) with TypeAdapter(int | None) and TypeAdapter(bool | None)
CASES: list[tuple[Any, int | None, bool | None]] = [
    (4, 4, None), (0, 0, False), (1, 1, True), (2, 2, None), (True, 1, True),
    (False, 0, False), (4.0, 4, None), (0.0, 0, False), (1.0, 1, True), (0.5, None, None),
    (4.5, None, None), (10**30, 10**30, None), ("4", 4, None), (" 4 ", 4, None),
    (" -4 ", -4, None), ("+4", 4, None), ("+4.0", 4, None), ("4.00", 4, None),
    ("04", 4, None), ("1_000", 1000, None), ("4_", None, None), ("_4", None, None),
    ("1__0", None, None), ("4.", None, None), (".0", None, None), ("4.5", None, None),
    ("4e2", None, None), ("0x10", None, None), ("", None, None), ("  ", None, None),
    ("\u0664", None, None), ("1", 1, True), ("0", 0, False), ("yes", None, True),
    ("Yes", None, True), ("TRUE", None, True), ("tRuE", None, True), ("on", None, True),
    ("y", None, True), ("t", None, True), ("off", None, False), ("no", None, False),
    ("n", None, False), ("f", None, False), (" yes ", None, None), ("maybe", None, None),
    (None, None, None), ([1], None, None), ({"a": 1}, None, None),
    ("9" * 5000, None, None),          # pydantic: int_parsing_size (Python: past 4,300 digits)
]


@pytest.mark.parametrize(("value", "as_int", "as_bool"), CASES)
def test_values_are_taken_as_pydantic_takes_them(value: Any, as_int: int | None,
                                                  as_bool: bool | None) -> None:
    assert lax_int(value) == as_int and type(lax_int(value)) is type(as_int)
    assert lax_bool(value) is as_bool


# pydantic's lax float: TypeAdapter(float | None), as above
FLOATS: list[tuple[Any, float | None]] = [
    ("0.1", 0.1), (" 0.1 ", 0.1), ("1e3", 1000.0), ("1_0", 10.0), (".5", 0.5), ("5.", 5.0),
    ("1_000.5", 1000.5), (True, 1.0), (2, 2.0), (0.25, 0.25), ("0x1", None), ("", None),
    ("abc", None), (None, None), ([0.1], None),
]


@pytest.mark.parametrize(("value", "as_float"), FLOATS)
def test_numbers_are_taken_as_pydantic_takes_them(value: Any, as_float: float | None) -> None:
    assert lax_float(value) == as_float


def test_non_finite_texts_are_numbers_for_the_range_checks_to_refuse() -> None:
    assert lax_float("inf") == float("inf") and lax_float("-Infinity") == float("-inf")
    nan = lax_float("nan")
    assert nan is not None and nan != nan
