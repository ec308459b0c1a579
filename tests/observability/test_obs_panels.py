"""Every panel query of every dashboard returns data from a live Prometheus scraping a live
router and emulated fleet, with the template variables substituted by their real values."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from router.dashboard.render import panel_queries, panels_of
from router.dashboard.variables import resolve_variables
from tests.observability.obs_stack import MODEL, TINY_MODEL, TINY_WORKER, Stack

pytestmark = [pytest.mark.observability, pytest.mark.integration]

DASHBOARD_DIR = Path(__file__).resolve().parents[2] / "config/grafana/dashboards"
FILES = sorted(DASHBOARD_DIR.glob("*.json"))


def _load(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text()))


def test_the_dashboards_have_at_least_15_panels_and_the_variables() -> None:
    assert [p.name for p in FILES] == ["cost.json", "fleet.json", "routing.json"]
    total = 0
    for path in FILES:
        dashboard = _load(path)
        assert dashboard["schemaVersion"] >= 36
        names = [v["name"] for v in dashboard["templating"]["list"]]
        assert names == ["DS_PROMETHEUS", "model", "gpu", "worker"]
        for panel in panels_of(dashboard):
            assert panel["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
            assert panel["targets"], panel["title"]
        total += len(panels_of(dashboard))
    assert total >= 15


def test_template_variables_resolve_to_the_fleet(live_stack: Stack) -> None:
    values = resolve_variables(_load(DASHBOARD_DIR / "fleet.json"), live_stack.prometheus)
    assert values == {
        "model": sorted([MODEL, TINY_MODEL]),
        "gpu": ["A100-80GB", "H100-80GB", "L40S-48GB"],
        "worker": ["a100-0", "h100-0", "l40s-0", TINY_WORKER]}


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_every_panel_query_returns_data(live_stack: Stack, path: Path) -> None:
    dashboard = _load(path)
    client = live_stack.prometheus
    values = resolve_variables(dashboard, client)
    queries = panel_queries(dashboard, values, rate_interval="5s")
    assert len(queries) >= len(panels_of(dashboard))
    empty = []
    for q in queries:
        series = client.query_range(q.expr, live_stack.started_at, live_stack.traffic_done_at,
                                    1.0)
        finite = [v for s in series for _, v in s.points if math.isfinite(v)]
        if not finite:
            empty.append(f"{q.panel}: {q.expr}")
    assert empty == []


def test_queries_carry_the_substituted_values(live_stack: Stack) -> None:
    dashboard = _load(DASHBOARD_DIR / "fleet.json")
    values = resolve_variables(dashboard, live_stack.prometheus)
    exprs = [q.expr for q in panel_queries(dashboard, values, "5s")]
    assert not any("$" in e for e in exprs)
    assert any('worker=~".*"' in e for e in exprs)          # All, as Grafana sends it
    chosen = resolve_variables(dashboard, live_stack.prometheus,
                               {"worker": ["a100-0", "h100-0"], "model": [MODEL]})
    exprs = [q.expr for q in panel_queries(dashboard, chosen, "5s")]
    assert any('worker=~"(a100-0|h100-0)"' in e for e in exprs)
    assert any(r'model_name=~"meta-llama/Llama-3\\.1-8B-Instruct"' in e for e in exprs)
