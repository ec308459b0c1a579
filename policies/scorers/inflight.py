"""``inflight`` scorer: prefer workers with less work the router has sent and not seen finish.

The load is ``WorkerView.inflight_requests`` (``unit: requests``, default) or
``WorkerView.inflight_tokens`` (``unit: tokens``: uncached prompt tokens not yet prefilled
plus tokens still to decode). Normalised like ``queue-depth``: ``relative`` scores
``(max - load) / (max - min)`` (all 1 when equal); ``absolute`` scores
``1 - min(load, threshold) / threshold``.

```yaml
scorers:
  - type: inflight
    weight: 1.0
    params: {unit: requests, mode: relative, threshold: 64}
```
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Literal

from policies.base import CycleState, RoutingRequest
from policies.errors import ParamError
from policies.registry import PluginRegistry
from policies.scorers.column import ColumnScorer
from policies.scorers.normalize import Normalization, normalize_column
from workers.models import WorkerView

TYPE_NAME = "inflight"


@dataclass(frozen=True, slots=True)
class InflightParams:
    unit: Literal["requests", "tokens"] = "requests"
    mode: Normalization = "relative"
    threshold: float = 64.0

    def __post_init__(self) -> None:
        if self.threshold <= 0:
            raise ParamError("threshold", "must be > 0")


class InflightScorer(ColumnScorer):
    def __init__(self, name: str, params: InflightParams) -> None:
        self.name = name
        self.params = params

    def score_column(self, request: RoutingRequest, workers: Sequence[WorkerView],
                     cycle: CycleState) -> list[float]:
        """The same scores as a list in view order (no dict; ``policies.profile``)."""
        load = _tokens if self.params.unit == "tokens" else _requests
        return normalize_column(list(map(float, map(load, workers))), self.params.mode,
                                self.params.threshold)


_tokens = attrgetter("inflight_tokens")
_requests = attrgetter("inflight_requests")


def register(registry: PluginRegistry) -> None:
    registry.register(TYPE_NAME, "scorer", InflightParams,
                      lambda params, ctx: InflightScorer(ctx.name, params))
