"""Panel queries from Grafana JSON, legends, and rendering with a fake Prometheus."""

from __future__ import annotations

from pathlib import Path

from router.dashboard.definitions import FLEET
from router.dashboard.grafana import dashboard_json
from router.dashboard.prometheus_api import PrometheusClient, Series
from router.dashboard.render import QueryWindow, panel_queries, render_dashboard, series_name

VALUES = {"model": ["m"], "gpu": ["H100-80GB"], "worker": ["w1", "w2"]}


def test_panel_queries_substitute_and_mark_reference_lines() -> None:
    queries = panel_queries(dashboard_json(FLEET), VALUES, "5s")
    kv = [q for q in queries if q.panel == "KV cache usage per worker"]
    assert [(q.expr, q.reference, q.unit) for q in kv] == [
        ('max by (worker) (vllm:kv_cache_usage_perc{model_name=~"m", worker=~"(w1|w2)"})',
         False, "percentunit"),
        ("kvroute:threshold:kv_usage_warning", True, "percentunit")]
    assert sum(len(p.queries) for p in FLEET.panels) == len(queries)


def test_series_names_follow_the_legend_format() -> None:
    series = Series({"worker": "w1", "gpu": "H100-80GB"}, ())
    assert series_name(series, "{{worker}} on {{ gpu }}") == "w1 on H100-80GB"
    assert series_name(series, "{{rule}}") == "(none)"
    assert series_name(series, "__auto") == 'gpu="H100-80GB", worker="w1"'


class _Fake(PrometheusClient):
    def __init__(self) -> None:
        super().__init__("http://fake")

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[Series]:
        if "preemptions" in expr:
            return []
        return [Series({"worker": "w1", "gpu": "H100-80GB", "pool": "p"},
                       tuple((start + i, float(i % 3)) for i in range(10)))]


def test_render_writes_a_png_and_names_empty_panels(tmp_path: Path) -> None:
    snapshot = render_dashboard(dashboard_json(FLEET), _Fake(), VALUES,
                                QueryWindow(1.7e9, 1.7e9 + 10, 1.0, "5s"), tmp_path / "f.png")
    assert snapshot.path == tmp_path / "f.png"
    assert snapshot.panels == len(FLEET.panels) == 14
    assert snapshot.empty_panels == ("Preemptions/s per worker",)
    assert snapshot.path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
