"""``max-score`` picker: the candidate with the highest weighted total.

Candidates within ``tie_tolerance`` of the best total are tied; one of them is chosen at
random (seeded: ``seed`` param, else the engine seed) so that equal workers share load.
This is the default picker of a profile that names none.

```yaml
picker:
  type: max-score
  params: {tie_tolerance: 1.0e-9, seed: 7}
```
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import compress, repeat
from operator import attrgetter, le

from policies.base import CandidateScore, CycleState, RoutingRequest
from policies.candidates import CandidateTable
from policies.errors import ParamError
from policies.pickers.seeding import SeededParams, picker_rng
from policies.registry import PluginRegistry

TYPE_NAME = "max-score"
_total = attrgetter("total")


@dataclass(frozen=True, slots=True)
class MaxScoreParams(SeededParams):
    tie_tolerance: float = 1e-9

    def __post_init__(self) -> None:
        if self.tie_tolerance < 0:
            raise ParamError("tie_tolerance", "must be >= 0")


class MaxScorePicker:
    def __init__(self, name: str, tie_tolerance: float, rng: random.Random) -> None:
        self.name = name
        self.tie_tolerance = tie_tolerance
        self._rng = rng

    def pick(self, request: RoutingRequest, candidates: Sequence[CandidateScore],
             cycle: CycleState) -> CandidateScore:
        # a lazy table gives its totals column; candidate objects are built only for the pick
        totals = (candidates.totals if isinstance(candidates, CandidateTable)
                  else list(map(_total, candidates)))
        floor = max(totals) - self.tie_tolerance
        tied = list(compress(range(len(totals)), map(le, repeat(floor), totals)))
        return candidates[tied[0] if len(tied) == 1 else self._rng.choice(tied)]


def register(registry: PluginRegistry) -> None:
    registry.register(
        TYPE_NAME, "picker", MaxScoreParams,
        lambda params, ctx: MaxScorePicker(ctx.name, params.tie_tolerance,
                                           picker_rng(params, ctx)))
