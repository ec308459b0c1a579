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

from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter

from policies.base import CycleState, RoutingRequest
from policies.registry import PluginRegistry
from policies.scorers.column import ColumnScorer
from workers.models import WorkerView

TYPE_NAME = "kv-usage"


@dataclass(frozen=True, slots=True)
class KvUsageParams:
    pass


class KvUsageScorer(ColumnScorer):
    def __init__(self, name: str) -> None:
        self.name = name

    def score_column(self, request: RoutingRequest, workers: Sequence[WorkerView],
                     cycle: CycleState) -> list[float]:
        """The same scores as a list in view order (no dict; ``policies.profile``):
        ``1 - min(1, max(0, usage))``, where NaN counts as 0 as ``max(0.0, nan)`` does."""
        return [1.0 if not usage > 0.0 else 0.0 if usage >= 1.0 else 1.0 - usage
                for usage in map(_usage, workers)]


_usage = attrgetter("kv_usage")


def register(registry: PluginRegistry) -> None:
    registry.register(TYPE_NAME, "scorer", KvUsageParams,
                      lambda params, ctx: KvUsageScorer(ctx.name))
