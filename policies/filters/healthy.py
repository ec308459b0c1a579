"""``healthy`` filter: keep workers whose last scrape succeeded and is recent enough.

A worker is kept when ``WorkerView.healthy`` is true and, if ``max_staleness_s`` is set,
its snapshot is at most that many seconds old.

```yaml
filters:
  - type: healthy
    params: {max_staleness_s: 10.0}   # default: null (any age)
```
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter

from policies.base import CycleState, RoutingRequest
from policies.errors import ParamError
from policies.registry import PluginRegistry
from workers.models import WorkerView

TYPE_NAME = "healthy"


@dataclass(frozen=True, slots=True)
class HealthyFilterParams:
    max_staleness_s: float | None = None

    def __post_init__(self) -> None:
        if self.max_staleness_s is not None and self.max_staleness_s <= 0:
            raise ParamError("max_staleness_s", "must be > 0")


_healthy = attrgetter("healthy")


class HealthyFilter:
    def __init__(self, name: str, params: HealthyFilterParams) -> None:
        self.name = name
        self.max_staleness_s = params.max_staleness_s

    def filter(self, request: RoutingRequest, workers: Sequence[WorkerView],
               cycle: CycleState) -> Sequence[WorkerView]:
        limit = self.max_staleness_s
        if limit is None and all(map(_healthy, workers)):    # checked in C
            return list(workers)
        return [view for view in workers
                if view.healthy and (limit is None or view.staleness_s <= limit)]


def register(registry: PluginRegistry) -> None:
    registry.register(TYPE_NAME, "filter", HealthyFilterParams,
                      lambda params, ctx: HealthyFilter(ctx.name, params))
