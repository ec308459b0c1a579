"""``cost`` scorer: what serving this request would cost on each worker, in dollars.

Cost = the worker's ``price_per_hour`` / 3600 × the request's estimated GPU-seconds there:
its own uncached prefill compute plus its share of every decode step of the batch it joins
(``policies.latency.estimator``). A cached prefix, a fast GPU for prefill-heavy prompts, a
cheap GPU for short ones and a busy batch to share all lower it. Score = cheapest / cost
(1.0 for the cheapest). The chosen worker's ``estimated_cost_usd`` lands in
``Decision.attributes`` (the router adds it to ``kvroute_cost_dollars_total``).

```yaml
scorers:
  - type: cost
    weight: 1
    params: {default_output_tokens: 256}
```
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from policies.base import CycleState
from policies.errors import ParamError
from policies.latency.attributes import LazyAttribute, record_attribute
from policies.latency.estimator import Estimate
from policies.registry import PluginRegistry
from policies.scorers.estimate_scorer import EstimateScorer

TYPE_NAME = "cost"


@dataclass(frozen=True, slots=True)
class CostParams:
    default_output_tokens: int = 256

    def __post_init__(self) -> None:
        if self.default_output_tokens < 1:
            raise ParamError("default_output_tokens", "must be >= 1")


_cost = attrgetter("cost_usd")


class CostScorer(EstimateScorer):
    clamped_column = True      # score_column: floats in [0, 1] (policies.profile)

    def __init__(self, name: str, params: CostParams,
                 shared: MutableMapping[str, Any] | None = None) -> None:
        super().__init__(name, params.default_output_tokens, shared)

    def _scores(self, estimates: Mapping[str, Estimate], cycle: CycleState) -> list[float]:
        """Scores in the order of ``estimates``."""
        if not estimates:
            return []
        costs = list(map(_cost, estimates.values()))
        cheapest = min(costs)
        record_attribute(cycle, "estimated_cost_usd",
                         LazyAttribute(estimates, lambda w: estimates[w].cost_usd))
        return [cheapest / cost if cost > 0 else 1.0 for cost in costs]


def register(registry: PluginRegistry) -> None:
    registry.register(TYPE_NAME, "scorer", CostParams,
                      lambda params, ctx: CostScorer(ctx.name, params,
                                                      ctx.profile_state),
                      needs=("num_prompt_tokens", "predicted_output_tokens"))
