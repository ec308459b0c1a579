"""``random`` picker: a uniformly random candidate, ignoring scores (a baseline).

```yaml
picker:
  type: random
  params: {seed: 7}
```
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from policies.base import CandidateScore, CycleState, RoutingRequest
from policies.pickers.seeding import SeededParams, picker_rng
from policies.registry import PluginRegistry

TYPE_NAME = "random"


@dataclass(frozen=True, slots=True)
class RandomParams(SeededParams):
    pass


class RandomPicker:
    def __init__(self, name: str, rng: random.Random) -> None:
        self.name = name
        self._rng = rng

    def pick(self, request: RoutingRequest, candidates: Sequence[CandidateScore],
             cycle: CycleState) -> CandidateScore:
        # a position drawn as choice() draws an item: the same candidate, no list built
        return candidates[self._rng.choice(range(len(candidates)))]


def register(registry: PluginRegistry) -> None:
    registry.register(TYPE_NAME, "picker", RandomParams,
                      lambda params, ctx: RandomPicker(ctx.name, picker_rng(params, ctx)))
