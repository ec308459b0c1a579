"""``estimated-time`` scorer: how soon each worker would serve this request, in seconds.

Per worker (``policies.latency.estimator``): TTFT from the uncached prefill work queued
there plus this prompt's uncached tokens, through that GPU's prefill rate with the running
decodes sharing each step; TPOT from the batch it would join, diluted by arriving prefill.
Rates come from the engine's latency model for the worker's GPU class and are corrected
online from observed TTFT/TPOT (per worker, per GPU class). Long prompts therefore go where
their estimated time is best (a fast GPU, or one that already caches most of the prompt)
without length buckets.

Score = ``(1 − tpot_share) · best_ttft / ttft + tpot_share · best_tpot / tpot`` (1.0 for
the fastest). The chosen worker's ``estimated_ttft_s`` / ``estimated_tpot_s`` land in
``Decision.attributes``. Declare it after ``prefix`` so that cached tokens count.

```yaml
scorers:
  - type: estimated-time
    weight: 3
    params: {tpot_share: 0.3, default_output_tokens: 256}
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

TYPE_NAME = "estimated-time"


@dataclass(frozen=True, slots=True)
class EstimatedTimeParams:
    tpot_share: float = 0.3
    default_output_tokens: int = 256   # when the request sets no max_tokens

    def __post_init__(self) -> None:
        if not 0.0 <= self.tpot_share <= 1.0:
            raise ParamError("tpot_share", "must be between 0 and 1")
        if self.default_output_tokens < 1:
            raise ParamError("default_output_tokens", "must be >= 1")


_ttft = attrgetter("ttft_s")
_tpot = attrgetter("tpot_s")


class EstimatedTimeScorer(EstimateScorer):
    clamped_column = True      # score_column: floats in [0, 1] (policies.profile)

    def __init__(self, name: str, params: EstimatedTimeParams,
                 shared: MutableMapping[str, Any] | None = None) -> None:
        super().__init__(name, params.default_output_tokens, shared)
        self.tpot_share = params.tpot_share

    def _scores(self, estimates: Mapping[str, Estimate], cycle: CycleState) -> list[float]:
        """Scores in the order of ``estimates``."""
        if not estimates:
            return []
        ttfts = list(map(_ttft, estimates.values()))
        tpots = list(map(_tpot, estimates.values()))
        best_ttft, best_tpot = min(ttfts), min(tpots)
        record_attribute(cycle, "estimated_ttft_s",
                         LazyAttribute(estimates, lambda w: estimates[w].ttft_s))
        record_attribute(cycle, "estimated_tpot_s",
                         LazyAttribute(estimates, lambda w: estimates[w].tpot_s))
        share = self.tpot_share
        ttft_part, tpot_part = (1.0 - share) * best_ttft, share * best_tpot
        # (the conditional expressions stand for max(x, 1e-9), with its tie and NaN rules)
        return [ttft_part / (1e-9 if ttft < 1e-9 else ttft)
                + tpot_part / (1e-9 if tpot < 1e-9 else tpot)
                for ttft, tpot in zip(ttfts, tpots, strict=True)]


def register(registry: PluginRegistry) -> None:
    registry.register(TYPE_NAME, "scorer", EstimatedTimeParams,
                      lambda params, ctx: EstimatedTimeScorer(ctx.name, params,
                                                      ctx.profile_state),
                      needs=("num_prompt_tokens", "predicted_output_tokens"))
