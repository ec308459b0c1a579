"""A small client of Prometheus' HTTP API: range queries and label values (stdlib only)."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from workers.direct_http import direct_urlopen


class PrometheusError(RuntimeError):
    """Prometheus could not be reached or refused a query; the message says which."""


@dataclass(frozen=True, slots=True)
class Series:
    labels: Mapping[str, str]
    points: tuple[tuple[float, float], ...]     # (unix seconds, value); NaN kept


class PrometheusClient:
    def __init__(self, base_url: str, timeout_s: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s

    def _get(self, path: str, params: Sequence[tuple[str, str]]) -> Any:
        url = f"{self.base_url}{path}?{urllib.parse.urlencode(params)}"
        try:
            # never through HTTP_PROXY: Prometheus is reached directly, as the workers are
            with direct_urlopen(url, timeout=self.timeout_s) as resp:
                body = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:500]
            raise PrometheusError(f"GET {path}: HTTP {exc.code}: {detail}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise PrometheusError(f"GET {self.base_url}{path}: {exc}") from None
        if body.get("status") != "success":
            raise PrometheusError(f"GET {path}: {body.get('error', body)}")
        return body["data"]

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[Series]:
        data = self._get("/api/v1/query_range", [
            ("query", expr), ("start", f"{start:.3f}"), ("end", f"{end:.3f}"),
            ("step", f"{step:g}")])
        return [Series(dict(item["metric"]),
                       tuple((float(t), float(v)) for t, v in item["values"]))
                for item in data["result"]]

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self._get("/api/v1/query", [("query", expr)])
        return list(data["result"])

    def label_values(self, label: str, match: str | None = None) -> list[str]:
        params = [("match[]", match)] if match else []
        return sorted(str(v) for v in self._get(f"/api/v1/label/{label}/values", params))

    def alerts(self) -> list[dict[str, Any]]:
        return list(self._get("/api/v1/alerts", [])["alerts"])
