"""Template variable substitution and resolution (a fake Prometheus for the pure logic)."""

from __future__ import annotations

from typing import Any

import pytest

from router.dashboard.prometheus_api import PrometheusClient
from router.dashboard.variables import (
    VariableError,
    query_variables,
    regex_value,
    resolve_variables,
    substitute,
)


def test_regex_value_escapes_for_a_promql_string() -> None:
    assert regex_value([]) == ".*"
    assert regex_value(["h100-0"]) == "h100-0"
    assert regex_value(["a.b", "c|d"]) == r"(a\\.b|c\\|d)"


def test_substitute_every_syntax() -> None:
    values = {"worker": ["a", "b"], "model": ["m"]}
    expr = 'rate(x{worker=~"$worker", model=~"${model}", m2=~"[[model]]"}[$__rate_interval])'
    assert substitute(expr, values, "5s") == \
        'rate(x{worker=~"(a|b)", model=~"m", m2=~"m"}[5s])'
    assert substitute("$unknown $__range", values, "5s", "2h") == "$unknown 2h"


class _FakeClient(PrometheusClient):
    def __init__(self) -> None:
        super().__init__("http://fake")
        self.calls: list[tuple[str, str | None]] = []

    def label_values(self, label: str, match: str | None = None) -> list[str]:
        self.calls.append((label, match))
        return {"model": ["m1", "m2"], "gpu": ["H100"], "worker": ["w1"]}[label]


DASHBOARD: dict[str, Any] = {"templating": {"list": [
    {"name": "DS_PROMETHEUS", "type": "datasource", "query": "prometheus"},
    {"name": "model", "type": "query", "query": {"query": "label_values(up, model)"}},
    {"name": "gpu", "type": "query", "definition": 'label_values(up{model=~"$model"}, gpu)',
     "query": 'label_values(up{model=~"$model"}, gpu)'},
    {"name": "worker", "type": "query", "query": {"query": "label_values(worker)"}},
]}}


def test_variables_chain_in_order() -> None:
    client = _FakeClient()
    assert resolve_variables(DASHBOARD, client) == {
        "model": ["m1", "m2"], "gpu": ["H100"], "worker": ["w1"]}
    assert client.calls == [("model", "up"), ("gpu", 'up{model=~".*"}'),   # All, as Grafana
                            ("worker", None)]
    assert [n for n, _ in query_variables(DASHBOARD)] == ["model", "gpu", "worker"]


def test_chosen_values_are_kept_and_feed_later_queries() -> None:
    client = _FakeClient()
    values = resolve_variables(DASHBOARD, client, {"model": ["m2"]})
    assert values["model"] == ["m2"]
    assert ("gpu", 'up{model=~"m2"}') in client.calls


def test_other_variable_queries_are_refused() -> None:
    board = {"templating": {"list": [{"name": "x", "type": "query", "query": "query_result(up)"}]}}
    with pytest.raises(VariableError, match="variable x: only label_values"):
        resolve_variables(board, _FakeClient())


def test_a_variable_at_all_is_substituted_as_grafana_does() -> None:
    """The snapshot sent an alternation of the values found where Grafana sends allValue .*,
    which also matches an empty label: a panel drawing refused requests (no worker) as a
    series of 1443 % looked clean in the snapshot."""
    values = resolve_variables(DASHBOARD, _FakeClient(), {"gpu": ["H100"]})
    assert substitute('x{model=~"$model", gpu=~"$gpu"}', values, "5s") == \
        'x{model=~".*", gpu=~"H100"}'
