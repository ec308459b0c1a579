"""Dynamo's worker selection: argmin cost, or softmax sampling when the router is warm.

Source (``--router-temperature``, default 0; peer-routers.md §2.4): temperature 0 picks the
lowest-cost worker (ties at random); above 0 it samples from a softmax over normalised cost
logits. Candidates' totals are ``1 - normalised cost`` when scored by ``dynamo-kv-cost``, so
``P(w) ∝ exp(total_w / temperature)`` is the same distribution. Seeded by the engine::

    picker: {type: dynamo-softmax, params: {temperature: 0.5}}
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from policies.base import CandidateScore, CycleState, RoutingRequest
from policies.errors import ParamError
from policies.registry import PluginRegistry

TYPE_NAME = "dynamo-softmax"


@dataclass(frozen=True, slots=True)
class SoftmaxParams:
    temperature: float = 0.0

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ParamError("temperature", "must be >= 0")


class SoftmaxPicker:
    def __init__(self, params: SoftmaxParams | None = None, rng: random.Random | None = None,
                 name: str = TYPE_NAME) -> None:
        self.name = name
        self.temperature = (params or SoftmaxParams()).temperature
        self._random = rng or random.Random(0)

    def pick(self, request: RoutingRequest, candidates: Sequence[CandidateScore],
             cycle: CycleState) -> CandidateScore:
        if not candidates:
            raise ValueError("no candidates to pick from")
        best = max(candidate.total for candidate in candidates)
        if self.temperature == 0:
            return self._random.choice([c for c in candidates if c.total == best])
        weights = [math.exp((c.total - best) / self.temperature) for c in candidates]
        return self._random.choices(list(candidates), weights=weights, k=1)[0]


def register(registry: PluginRegistry) -> None:
    registry.register(TYPE_NAME, "picker", SoftmaxParams,
                      lambda params, ctx: SoftmaxPicker(params, ctx.rng(), ctx.name))
