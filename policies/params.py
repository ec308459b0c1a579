"""Strict construction of typed parameter dataclasses from YAML values.

Every plugin declares its parameters as a frozen dataclass with defaults; ``build_params``
turns the raw ``params:`` mapping of a plugin spec into an instance, refusing unknown keys,
missing required fields and values of the wrong type with a ``RoutingConfigError`` whose
message starts with the field's full path::

    profiles.default.scorers[0].params.threshold: must be an integer

Supported field types: ``bool``, ``int``, ``float`` (ints accepted), ``str``, ``Literal[...]``,
``X | None``, unions of those, ``tuple[X, ...]`` (from a YAML list), ``Mapping[str, X]`` /
``dict[str, X]`` (from a YAML mapping), nested parameter dataclasses, and ``Any``.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

from policies.errors import ParamError, RoutingConfigError
from workers.yaml_text import yaml_words

T = TypeVar("T")

_MISSING = object()


def build_params(params_type: type[T], raw: object, path: str) -> T:
    """Build ``params_type`` from ``raw`` (a mapping or None), strictly."""
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise RoutingConfigError(f"{path}: must be a mapping")
    fields = {f.name: f for f in dataclasses.fields(params_type)  # type: ignore[arg-type]
              if f.init}
    hints = typing.get_type_hints(params_type)
    for key in raw:
        if key not in fields:
            expected = ", ".join(sorted(fields)) or "no parameters"
            raise RoutingConfigError(f"{path}.{key}: unknown key (expected one of: {expected})")
    values: dict[str, Any] = {}
    for name, field in fields.items():
        if name in raw:
            values[name] = coerce(hints[name], raw[name], f"{path}.{name}")
        elif (field.default is dataclasses.MISSING
              and field.default_factory is dataclasses.MISSING):
            raise RoutingConfigError(f"{path}.{name}: required")
    try:
        return params_type(**values)
    except ParamError as exc:
        raise RoutingConfigError(f"{path}.{exc.field}: {exc.message}") from exc
    except (TypeError, ValueError) as exc:
        raise RoutingConfigError(f"{path}: {exc}") from exc


def coerce(tp: Any, value: object, path: str) -> Any:
    """Check ``value`` against the type ``tp``; return it converted (lists become tuples)."""
    result = _try_coerce(tp, value, path)
    if result is _MISSING:
        raise RoutingConfigError(f"{path}: {_describe(tp)}{_yaml_hint(tp, value)}")
    return result


# a number with an exponent that YAML 1.1 reads as text: it needs a dot and a signed exponent
_NUMBER_WITH_EXPONENT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def _yaml_hint(tp: Any, value: object) -> str:
    """Why YAML gave what it gave, where that is its own reading of what was written: YAML
    1.1 (PyYAML's) reads ``1e-3`` and ``1.0e3`` as text (a float with an exponent needs a dot
    and the exponent's sign: ``1.0e-3``), and ``no``, ``yes``, ``on``, ``off`` as booleans."""
    wanted = _describe(tp)
    if (isinstance(value, str) and ("a number" in wanted or "an integer" in wanted)
            and _NUMBER_WITH_EXPONENT.fullmatch(value.strip())):
        return (f", got the text {value!r} (YAML 1.1 reads a number with an exponent as "
                "text unless it has a dot and a signed exponent: 1.0e-3, 1.0e+3)")
    if isinstance(value, bool) and "a string" in wanted:
        return (f", got the boolean {str(value).lower()} (YAML reads no, yes, on, off, true "
                "and false unquoted as booleans: quote it)")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and "a string" in wanted:
        return f", got the number {value!r} (quote it: '{value!r}')"
    shown = yaml_words(value)    # what was found, when short enough to read in one line
    if len(shown) > 60:
        return ""
    # (after a list of choices, a comma would read as one more of them)
    return f"; got {shown}" if wanted.startswith("must be one of") else f", got {shown}"


def _try_coerce(tp: Any, value: object, path: str) -> Any:
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if isinstance(value, float) and not math.isfinite(value):   # YAML's .nan, .inf
        raise RoutingConfigError(f"{path}: must be a finite number, not {value}")
    if origin is typing.Union or origin is types.UnionType:
        return _coerce_union(typing.get_args(tp), value, path)
    if origin is typing.Literal:
        return value if value in typing.get_args(tp) else _MISSING
    if origin is tuple:
        return _coerce_tuple(typing.get_args(tp), value, path)
    if origin in (dict, Mapping, typing.Mapping, list):
        return _coerce_container(origin, typing.get_args(tp), value, path)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return build_params(tp, value, path) if isinstance(value, Mapping) else _MISSING
    return _coerce_scalar(tp, value)


def _coerce_scalar(tp: Any, value: object) -> Any:
    if tp is bool:
        return value if isinstance(value, bool) else _MISSING
    if tp is int:
        return value if isinstance(value, int) and not isinstance(value, bool) else _MISSING
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        return _MISSING
    if tp is str:
        return value if isinstance(value, str) else _MISSING
    if tp is type(None):
        return None if value is None else _MISSING
    raise TypeError(f"unsupported parameter type {tp!r}")


def _coerce_union(args: tuple[Any, ...], value: object, path: str) -> Any:
    if value is None:
        return None if type(None) in args else _MISSING
    for arm in args:
        if arm is type(None):
            continue
        try:
            result = _try_coerce(arm, value, path)
        except RoutingConfigError:
            if len([a for a in args if a is not type(None)]) == 1:
                raise
            continue
        if result is not _MISSING:
            return result
    return _MISSING


def _coerce_tuple(args: tuple[Any, ...], value: object, path: str) -> Any:
    if not isinstance(value, (list, tuple)):
        return _MISSING
    item_type = args[0] if args else Any
    return tuple(coerce(item_type, item, f"{path}[{i}]") for i, item in enumerate(value))


def _coerce_container(origin: Any, args: tuple[Any, ...], value: object, path: str) -> Any:
    if origin is list:
        if not isinstance(value, (list, tuple)):
            return _MISSING
        item_type = args[0] if args else Any
        return [coerce(item_type, item, f"{path}[{i}]") for i, item in enumerate(value)]
    if not isinstance(value, Mapping):
        return _MISSING
    key_type, value_type = args if args else (Any, Any)
    out: dict[Any, Any] = {}
    for key, item in value.items():
        out[coerce(key_type, key, f"{path}.{key}")] = coerce(value_type, item, f"{path}.{key}")
    return types.MappingProxyType(out)


def _describe(tp: Any) -> str:
    """The 'must be ...' phrase for a type."""
    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is types.UnionType:
        arms = [a for a in typing.get_args(tp) if a is not type(None)]
        text = " or ".join(_describe(a).removeprefix("must be ") for a in arms)
        return f"must be {text}" + (" or null" if len(arms) < len(typing.get_args(tp)) else "")
    if origin is typing.Literal:
        return "must be one of: " + ", ".join(str(a) for a in typing.get_args(tp))
    if origin in (tuple, list):
        return "must be a list"
    if origin in (dict, Mapping, typing.Mapping) or dataclasses.is_dataclass(tp):
        return "must be a mapping"
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}
    return f"must be {names.get(tp, repr(tp))}"
