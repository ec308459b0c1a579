"""The cases a benchmark runs, chosen by key from a comma-separated option (``--cases a,b``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar


class KeyedCase(Protocol):
    @property
    def key(self) -> str: ...


Case = TypeVar("Case", bound=KeyedCase)


def chosen_cases(spec: str, cases: Sequence[Case]) -> list[Case]:
    """The cases ``spec`` names, in its order. ValueError names the keys it does not know
    (or says none was given) and the ones it does."""
    by_key = {case.key: case for case in cases}
    keys = [key.strip() for key in spec.split(",") if key.strip()]
    unknown = [key for key in keys if key not in by_key]
    if unknown or not keys:
        raise ValueError(f"unknown case(s) {', '.join(unknown) or '(none)'}; choose from "
                         f"{', '.join(by_key)}")
    return [by_key[key] for key in keys]
