"""policies/params.py: typed parameter dataclasses built strictly from YAML values."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

import pytest

from policies.errors import ParamError, RoutingConfigError
from policies.params import build_params


@dataclass(frozen=True)
class Inner:
    size: int = 1


@dataclass(frozen=True)
class Sample:
    name: str
    ratio: float = 0.5
    count: int = 3
    enabled: bool = True
    mode: Literal["a", "b"] = "a"
    limit: int | None = None
    tags: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    inner: Inner = field(default_factory=Inner)

    def __post_init__(self) -> None:
        if self.count < 0:
            raise ParamError("count", "must be >= 0")


def test_full_build_converts_containers() -> None:
    params = build_params(Sample, {"name": "x", "ratio": 2, "tags": ["p", "q"],
                                   "labels": {"pool": "a"}, "inner": {"size": 4},
                                   "limit": None}, "p")
    assert params == Sample(name="x", ratio=2.0, tags=("p", "q"),
                            labels=MappingProxyType({"pool": "a"}), inner=Inner(4))
    assert isinstance(params.ratio, float)


@pytest.mark.parametrize(("raw", "message"), [
    ({}, "p.name: required"),
    ({"name": 1}, "p.name: must be a string, got the number 1 (quote it: '1')"),
    ({"name": "x", "ratio": "high"}, "p.ratio: must be a number, got 'high'"),
    ({"name": "x", "ratio": True}, "p.ratio: must be a number, got true"),
    ({"name": "x", "count": 1.5}, "p.count: must be an integer, got 1.5"),
    ({"name": "x", "count": -1}, "p.count: must be >= 0"),
    ({"name": "x", "enabled": "yes"}, "p.enabled: must be a boolean, got 'yes'"),
    ({"name": "x", "mode": "c"}, "p.mode: must be one of: a, b; got 'c'"),
    ({"name": "x", "limit": "none"}, "p.limit: must be an integer or null, got 'none'"),
    ({"name": "x", "tags": "p"}, "p.tags: must be a list, got 'p'"),
    ({"name": "x", "tags": ["p", 2]}, "p.tags[1]: must be a string, got the number 2 "
                                      "(quote it: '2')"),
    ({"name": "x", "labels": {"pool": 3}}, "p.labels.pool: must be a string, got the "
                                            "number 3 (quote it: '3')"),
    ({"name": "x", "inner": {"size": "big"}}, "p.inner.size: must be an integer, got "
                                             "'big'"),
    ({"name": "x", "inner": {"width": 1}}, "p.inner.width: unknown key (expected one of: size)"),
    ({"name": "x", "extra": 1}, "p.extra: unknown key (expected one of: count, enabled, inner, "
                                "labels, limit, mode, name, ratio, tags)"),
    (["name"], "p: must be a mapping"),
    # what YAML 1.1 makes of 1e-3 (text) and of an unquoted no (a boolean), said
    *(({"name": "x", "ratio": text}, f"p.ratio: must be a number, got the text '{text}' "
       "(YAML 1.1 reads a number with an exponent as text unless it has a dot and a signed "
       "exponent: 1.0e-3, 1.0e+3)") for text in ("1e-3", "1.0e3")),
    ({"name": False}, "p.name: must be a string, got the boolean false (YAML reads no, yes, "
     "on, off, true and false unquoted as booleans: quote it)"),
])
def test_errors_name_the_field(raw: object, message: str) -> None:
    with pytest.raises(RoutingConfigError) as info:
        build_params(Sample, raw, "p")
    assert str(info.value) == message
