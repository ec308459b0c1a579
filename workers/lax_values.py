"""JSON values as vLLM's request models take them: pydantic's lax mode.

An integer field takes a whole number, a whole float (``4.0``), a bool (``true`` is 1) or a
text of one (``"4"``, ``" -4 "``, ``"1_000"``, ``"4.00"``); a number field a number, a bool or
a text of one (``"0.1"``, ``"1e3"``, ``"inf"``); a boolean field takes a bool, 0 or
1 (``0.0``, ``1.0`` too) or a text such as ``"yes"``, ``"on"``, ``"t"``, ``"1"`` (any case).
What pydantic refuses is None here. The emulator reads its requests so, and the router reads
a request so before it forwards it untouched: refusing ``"max_tokens": "4"`` would refuse
what the engine serves.
"""

from __future__ import annotations

import re
from typing import Any

_INTEGER_TEXT = re.compile(r"[+-]?[0-9]+(?:_[0-9]+)*(?:\.0+)?")
_TRUE_TEXTS = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE_TEXTS = frozenset({"0", "off", "f", "false", "n", "no"})


def lax_int(value: Any) -> int | None:
    """``value`` as pydantic's lax ``int`` takes it; None when it would refuse it."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    if isinstance(value, str):
        text = value.strip()
        if _INTEGER_TEXT.fullmatch(text):
            try:
                return int(text.split(".", 1)[0].replace("_", ""))
            except ValueError:          # past Python's 4,300 digits: no request's number
                return None
    return None


def lax_float(value: Any) -> float | None:
    """``value`` as pydantic's lax ``float`` takes it (a bool, a number, a text of one:
    ``"0.1"``, ``" 1e3 "``, ``"inf"``, ``"nan"``); None when it would refuse it."""
    if isinstance(value, bool | int | float):
        return float(value)
    if isinstance(value, str) and value.isascii():
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def lax_int_error(value: Any) -> tuple[str, str]:
    """pydantic's message and error type for a ``value`` that ``lax_int`` refuses."""
    if isinstance(value, float):
        return ("Input should be a valid integer, got a number with a fractional part",
                "int_from_float")
    if isinstance(value, str):
        return ("Input should be a valid integer, unable to parse string as an integer",
                "int_parsing")
    return "Input should be a valid integer", "int_type"


def lax_bool(value: Any) -> bool | None:
    """``value`` as pydantic's lax ``bool`` takes it; None when it would refuse it."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        text = value.lower()
        if text in _TRUE_TEXTS:
            return True
        if text in _FALSE_TEXTS:
            return False
    return None
