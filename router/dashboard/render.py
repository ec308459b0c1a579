"""Render one Grafana dashboard's panels from live Prometheus data to a PNG (matplotlib Agg).

Each panel's queries run as range queries with the template variables substituted; time
series panels become line charts (threshold/SLO series dashed red), stat panels horizontal
bars of each series' last value. Panels are laid out two per row under the dashboard title.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from router.dashboard.prometheus_api import PrometheusClient, Series
from router.dashboard.variables import substitute

COLUMNS = 2
MAX_LEGEND = 10


@dataclass(frozen=True, slots=True)
class PanelQuery:
    panel: str
    kind: str
    unit: str
    expr: str                # variables substituted
    legend: str
    reference: bool          # drawn as a threshold line


@dataclass(frozen=True, slots=True)
class Snapshot:
    path: Path
    panels: int
    empty_panels: tuple[str, ...]       # titles of panels drawn as "no data"


@dataclass(frozen=True, slots=True)
class QueryWindow:
    start: float
    end: float
    step: float
    rate_interval: str


def _reference_legends(panel: Mapping[str, Any]) -> set[str]:
    legends = set()
    for override in panel.get("fieldConfig", {}).get("overrides", []):
        props = {p.get("id") for p in override.get("properties", [])}
        if "custom.lineStyle" in props:
            legends.add(str(override.get("matcher", {}).get("options", "")))
    return legends


def panels_of(dashboard: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Leaf panels in layout order (rows flattened)."""
    out: list[Mapping[str, Any]] = []
    for panel in dashboard.get("panels", []):
        if panel.get("type") == "row":
            out.extend(panel.get("panels", []))
        else:
            out.append(panel)
    return out


def panel_queries(dashboard: Mapping[str, Any], values: Mapping[str, Sequence[str]],
                  rate_interval: str) -> list[PanelQuery]:
    """Every query of every panel, template variables substituted."""
    result = []
    for panel in panels_of(dashboard):
        refs = _reference_legends(panel)
        unit = str(panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "short"))
        for target in panel.get("targets", []):
            legend = str(target.get("legendFormat", ""))
            result.append(PanelQuery(
                panel=str(panel.get("title", "")), kind=str(panel.get("type", "timeseries")),
                unit=unit, expr=substitute(str(target["expr"]), values, rate_interval),
                legend=legend, reference=legend in refs))
    return result


def series_name(series: Series, legend: str) -> str:
    if legend and legend != "__auto":
        return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: series.labels.get(m.group(1), ""),
                      legend).strip() or "(none)"
    inner = ", ".join(f'{k}="{v}"' for k, v in sorted(series.labels.items()))
    return inner or "value"


def _scale(unit: str) -> tuple[float, str]:
    return {"percentunit": (100.0, "%"), "s": (1000.0, "ms"), "currencyUSD": (1.0, "$"),
            "reqps": (1.0, "req/s")}.get(unit, (1.0, ""))


def _draw_panel(ax: Any, title: str, queries: Sequence[PanelQuery],
                results: Sequence[Sequence[Series]]) -> int:
    """Draw one panel; return how many series (or stat values) it shows."""
    import matplotlib.dates as mdates

    factor, suffix = _scale(queries[0].unit if queries else "short")
    ax.set_title(title, fontsize=11, loc="left")
    kind = queries[0].kind if queries else "timeseries"
    drawn = 0
    if kind == "stat":
        names, last = [], []
        for query, series_list in zip(queries, results, strict=True):
            for s in series_list:
                finite = [v for _, v in s.points if math.isfinite(v)]
                if finite:
                    names.append(series_name(s, query.legend))
                    last.append(finite[-1] * factor)
        if names:
            ax.barh(names, last, color="#3274d9")
            for i, v in enumerate(last):
                ax.text(v, i, f" {v:g}{suffix}", va="center", fontsize=9)
            drawn = len(names)
        ax.tick_params(labelsize=8)
    else:
        for query, series_list in zip(queries, results, strict=True):
            for s in series_list:
                times = [datetime.fromtimestamp(t, UTC) for t, _ in s.points]
                vals = [v * factor if math.isfinite(v) else math.nan for _, v in s.points]
                style = {"color": "red", "linestyle": "--", "linewidth": 1.5} if query.reference \
                    else {"linewidth": 1.5}
                ax.plot(times, vals, label=series_name(s, query.legend)[:40], **style)
                drawn += 1
        ax.xaxis.set_major_formatter(
            mdates.DateFormatter("%H:%M:%S", tz=UTC))  # type: ignore[no-untyped-call]
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
        if suffix:
            ax.set_ylabel(suffix, fontsize=9)
        handles, labels = ax.get_legend_handles_labels()
        if handles:
            ax.legend(handles[:MAX_LEGEND], labels[:MAX_LEGEND], fontsize=7, loc="upper left",
                      ncol=2, framealpha=0.7)
    if drawn == 0:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes,
                fontsize=12, color="gray")
    return drawn


def render_dashboard(dashboard: Mapping[str, Any], client: PrometheusClient,
                     values: Mapping[str, Sequence[str]], window: QueryWindow,
                     out: Path) -> Snapshot:
    """Query every panel and write ``out`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    queries = panel_queries(dashboard, values, window.rate_interval)
    titles = list(dict.fromkeys(q.panel for q in queries))
    rows = max(1, math.ceil(len(titles) / COLUMNS))
    fig, axes = plt.subplots(rows, COLUMNS, figsize=(8 * COLUMNS, 3.6 * rows + 0.8),
                             squeeze=False)
    empty = []
    for index, title in enumerate(titles):
        mine = [q for q in queries if q.panel == title]
        results = [client.query_range(q.expr, window.start, window.end, window.step)
                   for q in mine]
        if _draw_panel(axes[index // COLUMNS][index % COLUMNS], title, mine, results) == 0:
            empty.append(title)
    for index in range(len(titles), rows * COLUMNS):
        axes[index // COLUMNS][index % COLUMNS].axis("off")
    span = (f"{datetime.fromtimestamp(window.start, UTC):%Y-%m-%d %H:%M:%S} to "
            f"{datetime.fromtimestamp(window.end, UTC):%H:%M:%S} UTC")
    fig.suptitle(f"{dashboard.get('title', '')}    ({span})", fontsize=14, x=0.01,
                 ha="left")
    height = 3.6 * rows + 0.8          # inches; fixed margins (tight_layout costs a draw)
    fig.subplots_adjust(left=0.05, right=0.98, bottom=0.35 / height, top=1 - 1.0 / height,
                        wspace=0.15, hspace=0.45)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=80)
    plt.close(fig)
    return Snapshot(out, len(titles), tuple(empty))
