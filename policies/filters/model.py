"""``model`` filter: keep the workers that serve the target model (or adapter).

The target model is the requested one after rule rewrites. When a rule sets a LoRA
adapter, workers that have it loaded (``WorkerView.lora_adapters``) are preferred: with
``adapter: prefer-loaded`` (default) the filter keeps only them when there are any, else the
workers serving the base model (which serve it only if they can load it on demand: vLLM
with a LoRA resolver plugin; a plain vLLM answers 404 for an adapter it has not loaded,
and a conversation continued there keeps its base model: ``router.director``);
``require-loaded`` keeps
only workers that have it loaded; ``any`` keeps every worker serving the base model or the
adapter. When the rule's model is a base model some worker runs, only that base model's
workers count: an adapter of the same name loaded on workers of another base model is
another adapter.

```yaml
filters:
  - type: model
    params: {adapter: prefer-loaded}   # prefer-loaded | require-loaded | any
```
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import attrgetter, contains
from typing import Literal

from policies.base import CycleState, RoutingRequest
from policies.cycle_keys import target_adapter, target_model
from policies.registry import PluginRegistry
from workers.models import WorkerView

TYPE_NAME = "model"


@dataclass(frozen=True, slots=True)
class ModelFilterParams:
    adapter: Literal["prefer-loaded", "require-loaded", "any"] = "prefer-loaded"


_served_models = attrgetter("served_models")


class ModelFilter:
    def __init__(self, name: str, params: ModelFilterParams) -> None:
        self.name = name
        self.params = params

    def filter(self, request: RoutingRequest, workers: Sequence[WorkerView],
               cycle: CycleState) -> Sequence[WorkerView]:
        model = target_model(cycle, request.model)
        adapter = target_adapter(cycle)
        if adapter is None:
            # usually every worker lists the model among its served ones: checked in C
            if all(map(contains, map(_served_models, workers), repeat(model))):
                return list(workers)
            # WorkerView.serves, inlined (a call per worker counts at 1,000)
            return [view for view in workers
                    if model in (view.served_models or view.info.models)
                    or model in view.lora_adapters]
        # a rule naming a base model with its adapter: an adapter of that name loaded on
        # another base model's workers is another adapter (vLLM ties each to its base)
        base = model if any(_runs(view, model) for view in workers) else None
        loaded = [view for view in workers if adapter in view.lora_adapters
                  and (base is None or _runs(view, base))]
        mode = self.params.adapter
        if mode == "require-loaded" or (mode == "prefer-loaded" and loaded):
            return loaded
        if base is not None:
            return [view for view in workers if _runs(view, base)]
        return [view for view in workers if view.serves(model) or view.serves(adapter)]


def _runs(view: WorkerView, model: str) -> bool:
    """Whether ``view``'s worker serves ``model`` itself (not as one of its adapters)."""
    return model in (view.served_models or view.info.models)


def register(registry: PluginRegistry) -> None:
    registry.register(TYPE_NAME, "filter", ModelFilterParams,
                      lambda params, ctx: ModelFilter(ctx.name, params))


