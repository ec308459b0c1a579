"""Grafana dashboard JSON (schemaVersion 39) from ``router.dashboard.spec`` definitions.

The datasource is the dashboard variable ``DS_PROMETHEUS`` (default uid ``prometheus``, the
provisioned one), so a dashboard imported elsewhere just picks its Prometheus there. Template
variables ``model``, ``gpu`` and ``worker`` chain from ``kvroute_worker_up``; each allows
several values and All (``.*``).
"""

from __future__ import annotations

from typing import Any

from router.dashboard.spec import Dashboard, Panel

SCHEMA_VERSION = 39
DATASOURCE = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
PANEL_HEIGHT = 8
TEMPLATE_VARIABLES = (   # name, label, label_values() query
    ("model", "Model", "label_values(kvroute_worker_up, model)"),
    ("gpu", "GPU class", 'label_values(kvroute_worker_up{model=~"$model"}, gpu)'),
    ("worker", "Worker", 'label_values(kvroute_worker_up{model=~"$model", gpu=~"$gpu"}, worker)'),
)


def _variable(name: str, label: str, query: str) -> dict[str, Any]:
    return {
        "name": name, "label": label, "type": "query", "datasource": DATASOURCE,
        "definition": query, "query": {"query": query, "refId": f"var-{name}"},
        "multi": True, "includeAll": True, "allValue": ".*", "refresh": 2, "sort": 1,
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]}, "hide": 0,
    }


def _templating() -> dict[str, Any]:
    datasource = {"name": "DS_PROMETHEUS", "label": "Data source", "type": "datasource",
                  "query": "prometheus", "hide": 0, "refresh": 1,
                  "current": {"selected": False, "text": "Prometheus", "value": "prometheus"}}
    return {"list": [datasource, *(_variable(*v) for v in TEMPLATE_VARIABLES)]}


def _reference_override(legend: str) -> dict[str, Any]:
    return {"matcher": {"id": "byName", "options": legend}, "properties": [
        {"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}},
        {"id": "custom.stacking", "value": {"mode": "none", "group": "A"}},
        {"id": "color", "value": {"mode": "fixed", "fixedColor": "red"}}]}


def panel_json(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    targets = [{"refId": chr(ord("A") + i), "datasource": DATASOURCE, "expr": q.expr,
                "legendFormat": q.legend or "__auto", "range": True}
               for i, q in enumerate(panel.queries)]
    defaults: dict[str, Any] = {"unit": panel.unit}
    if panel.kind == "timeseries":
        defaults["custom"] = {"lineWidth": 2, "fillOpacity": 10 if panel.stacked else 0,
                              "stacking": {"mode": "normal" if panel.stacked else "none",
                                           "group": "A"}}
    overrides = [_reference_override(q.legend) for q in panel.queries if q.reference_line]
    options: dict[str, Any] = (
        {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
         "tooltip": {"mode": "multi", "sort": "desc"}} if panel.kind == "timeseries" else
        {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
         "colorMode": "value", "graphMode": "none", "textMode": "value_and_name"})
    return {"id": panel_id, "type": panel.kind, "title": panel.title,
            "description": panel.description, "datasource": DATASOURCE,
            "gridPos": {"h": PANEL_HEIGHT, "w": panel.width, "x": x, "y": y},
            "fieldConfig": {"defaults": defaults, "overrides": overrides},
            "options": options, "targets": targets}


def dashboard_json(dashboard: Dashboard) -> dict[str, Any]:
    panels = []
    x = y = 0
    for panel_id, panel in enumerate(dashboard.panels, start=1):
        if x + panel.width > 24:
            x, y = 0, y + PANEL_HEIGHT
        panels.append(panel_json(panel, panel_id, x, y))
        x += panel.width
    return {
        "uid": dashboard.uid, "title": dashboard.title, "description": dashboard.description,
        "tags": ["kvroute"], "schemaVersion": SCHEMA_VERSION, "version": 1, "editable": True,
        "graphTooltip": 1, "refresh": "10s", "time": {"from": "now-1h", "to": "now"},
        "timezone": "utc", "templating": _templating(), "annotations": {"list": []},
        "panels": panels,
    }
