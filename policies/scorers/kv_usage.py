"""``kv-usage`` scorer: prefer workers with more free KV cache.

``score = 1 - kv_usage`` (vLLM's ``kv_cache_usage_perc``, 0..1), as llm-d's KV-cache
utilisation scorer. No parameters.

```yaml
scorers:
  - type: kv-usage
    weight: 1.0
```
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from policies.base import CycleState, RoutingRequest
from policies.registry import PluginRegistry
from workers.models import WorkerView

TYPE_NAME = "kv-usage"


@dataclass(frozen=True, slots=True)
class KvUsageParams:
    pass


class KvUsageScorer:
    def __init__(self, name: str) -> None:
        self.name = name

    def score(self, request: RoutingRequest, workers: Sequence[WorkerView],
              cycle: CycleState) -> Mapping[str, float]:
        return {view.info.id: 1.0 - min(1.0, max(0.0, view.kv_usage)) for view in workers}


def register(registry: PluginRegistry) -> None:
    registry.register(TYPE_NAME, "scorer", KvUsageParams,
                      lambda params, ctx: KvUsageScorer(ctx.name))
