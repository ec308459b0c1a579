"""``power-of-two`` picker: sample two distinct candidates at random, keep the higher total.

The classic "power of two choices": near-best balance without herding every request onto
the single best-looking worker between scrapes. On equal totals the first sampled wins.
With one candidate it is chosen. The reason compares the chosen worker with the other one
drawn.

```yaml
picker:
  type: power-of-two
  params: {seed: 7}
```
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from policies.base import CandidateScore, CycleState, RoutingRequest
from policies.cycle_keys import RUNNER_UP
from policies.pickers.seeding import SeededParams, picker_rng
from policies.registry import PluginRegistry

TYPE_NAME = "power-of-two"


@dataclass(frozen=True, slots=True)
class PowerOfTwoParams(SeededParams):
    pass


class PowerOfTwoPicker:
    def __init__(self, name: str, rng: random.Random) -> None:
        self.name = name
        self._rng = rng

    def pick(self, request: RoutingRequest, candidates: Sequence[CandidateScore],
             cycle: CycleState) -> CandidateScore:
        if len(candidates) == 1:
            return candidates[0]
        # positions drawn as sample() draws list items: the same pair, no list built
        first_at, second_at = self._rng.sample(range(len(candidates)), 2)
        first, second = candidates[first_at], candidates[second_at]
        chosen, other = (second, first) if second.total > first.total else (first, second)
        cycle.write(RUNNER_UP, other.worker_id)     # the reason weighs it, not the next best
        return chosen


def register(registry: PluginRegistry) -> None:
    registry.register(TYPE_NAME, "picker", PowerOfTwoParams,
                      lambda params, ctx: PowerOfTwoPicker(ctx.name, picker_rng(params, ctx)))
