"""``labels`` and ``pool`` filters: keep workers whose fleet labels match.

``labels`` keeps workers carrying every listed label with the given value; ``pool`` is the
shorthand for the ``pool`` label. (A rule's ``then: {pool: {...}}`` restricts candidates the
same way before the profile runs.)

```yaml
filters:
  - type: labels
    params: {match: {pool: premium, region: eu}}
  - type: pool
    params: {pool: premium}
```
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from policies.base import CycleState, RoutingRequest
from policies.errors import ParamError
from policies.registry import PluginRegistry
from workers.models import WorkerView


@dataclass(frozen=True, slots=True)
class LabelsFilterParams:
    match: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True, slots=True)
class PoolFilterParams:
    pool: str

    def __post_init__(self) -> None:
        if not self.pool:
            raise ParamError("pool", "must be a non-empty string")


class LabelsFilter:
    def __init__(self, name: str, match: Mapping[str, str]) -> None:
        self.name = name
        self.match = dict(match)

    def filter(self, request: RoutingRequest, workers: Sequence[WorkerView],
               cycle: CycleState) -> Sequence[WorkerView]:
        return [view for view in workers
                if all(view.labels.get(key) == value for key, value in self.match.items())]


def register(registry: PluginRegistry) -> None:
    registry.register("labels", "filter", LabelsFilterParams,
                      lambda params, ctx: LabelsFilter(ctx.name, params.match))
    registry.register("pool", "filter", PoolFilterParams,
                      lambda params, ctx: LabelsFilter(ctx.name, {"pool": params.pool}))
