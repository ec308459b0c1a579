"""The ``seed`` parameter shared by the randomised pickers.

A picker's own ``seed`` wins; otherwise the engine-wide seed (``PolicyEngine.build(...,
seed=...)``, derived per plugin position) is used; with neither, picks are nondeterministic.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from policies.registry import BuildContext


@dataclass(frozen=True, slots=True)
class SeededParams:
    seed: int | None = None


def picker_rng(params: SeededParams, context: BuildContext) -> random.Random:
    return random.Random(params.seed) if params.seed is not None else context.rng()
