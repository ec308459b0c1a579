"""Plain data describing a dashboard (panels, their queries, units, threshold lines).

``router.dashboard.definitions`` declares kvroute's dashboards with these types and
``router.dashboard.grafana`` turns them into Grafana JSON. The snapshot renderer reads the
Grafana JSON back, so it also works on dashboards edited in Grafana.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Query:
    expr: str
    legend: str = ""                 # Grafana legendFormat, e.g. "{{worker}}"
    reference_line: bool = False     # drawn dashed: an SLO or alert threshold


@dataclass(frozen=True, slots=True)
class Panel:
    title: str
    queries: tuple[Query, ...]
    unit: str = "short"              # Grafana unit id: short, percentunit, s, reqps, currencyUSD
    description: str = ""
    kind: str = "timeseries"         # timeseries or stat
    width: int = 12                  # of Grafana's 24 columns
    stacked: bool = False


@dataclass(frozen=True, slots=True)
class Dashboard:
    uid: str
    title: str
    description: str
    panels: tuple[Panel, ...]
    file_name: str                   # under config/grafana/dashboards/
