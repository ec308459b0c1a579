"""Grafana template variables: resolve ``label_values(...)`` queries and substitute values.

Chosen values become a regex alternation of the escaped values (backslashes doubled for the
PromQL string literal), as Grafana does for ``=~`` matchers. A variable left at All becomes
``.*``, the dashboards' ``allValue``, as Grafana sends it: that also matches series whose label
is empty (a refused request has no worker), which an alternation of the values found hid.
``$__rate_interval``, ``$__interval`` and ``$__range`` are replaced by the given durations.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from router.dashboard.prometheus_api import PrometheusClient

_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(?:(?P<match>.+),\s*)?(?P<label>\w+)\s*\)\s*$")
_REGEX_SPECIAL = re.compile(r"([\\.^$*+?()\[\]{}|])")


class VariableError(ValueError):
    """A template variable this renderer cannot resolve."""


def query_variables(dashboard: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(name, label_values query) of each ``query`` variable, in dashboard order."""
    result = []
    for var in dashboard.get("templating", {}).get("list", []):
        if var.get("type") != "query":
            continue
        query = var.get("query")
        text = query.get("query", "") if isinstance(query, dict) else str(query or "")
        result.append((str(var["name"]), text or str(var.get("definition", ""))))
    return result


class AllValues(list[str]):
    """Every value a variable has, selected as Grafana's All: substituted as ``.*``."""


def regex_value(values: Sequence[str]) -> str:
    if not values or isinstance(values, AllValues):
        return ".*"
    # a regex escape inside a PromQL string literal needs its backslash escaped too
    escaped = [_REGEX_SPECIAL.sub(r"\\\\\1", v) for v in values]
    return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"


def substitute(expr: str, values: Mapping[str, Sequence[str]], rate_interval: str,
               range_: str = "1h") -> str:
    builtins = {"__rate_interval": rate_interval, "__interval": rate_interval,
                "__range": range_}

    def replace(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2) or m.group(3)
        if name in builtins:
            return builtins[name]
        if name in values:
            return regex_value(values[name])
        return m.group(0)

    return re.sub(r"\$\{(\w+)(?::\w+)?\}|\[\[(\w+)\]\]|\$(\w+)", replace, expr)


def resolve_variables(dashboard: Mapping[str, Any], client: PrometheusClient,
                      chosen: Mapping[str, Sequence[str]] | None = None,
                      ) -> dict[str, list[str]]:
    """Each query variable's values: ``chosen`` ones as given, others every value Prometheus
    has, as ``AllValues`` (earlier variables substituted into later queries, as Grafana chains
    them)."""
    values: dict[str, list[str]] = {}
    for name, query in query_variables(dashboard):
        if chosen and name in chosen:
            values[name] = list(chosen[name])
            continue
        m = _LABEL_VALUES.match(query)
        if m is None:
            raise VariableError(f"variable {name}: only label_values(...) queries are "
                                f"supported, got {query!r}")
        match = m.group("match")
        values[name] = AllValues(client.label_values(
            m.group("label"), substitute(match, values, "1m") if match else None))
    return values
