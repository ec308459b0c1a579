"""What an emulated request will generate: its length and its token ids.

With ``ignore_eos`` a request generates exactly its max_tokens (finish_reason ``length``).
Otherwise the length is drawn from the configured distribution, and raised to the request's
``min_tokens`` + 1 (as in vLLM, EOS is masked until ``min_tokens`` were generated); a length
at or above max_tokens is cut to max_tokens (``length``), a shorter one ends on the EOS token
(``stop``), which counts as a completion token and renders as empty text, as in vLLM.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from workers.emulator.config import OutputLengthConfig
from workers.engine.api import FinishReason


@dataclass(frozen=True, slots=True)
class PlannedOutput:
    token_ids: tuple[int, ...]
    finish_reason: FinishReason


def draw_length(rng: random.Random, cfg: OutputLengthConfig) -> int:
    if cfg.dist == "fixed":
        return cfg.value
    if cfg.dist == "uniform":
        return rng.randint(cfg.min, cfg.max)
    mu = math.log(cfg.mean) - cfg.sigma * cfg.sigma / 2.0
    return max(1, round(rng.lognormvariate(mu, cfg.sigma)))


def plan_output(rng: random.Random, cfg: OutputLengthConfig, max_tokens: int, ignore_eos: bool,
                vocabulary: Sequence[int], eos_token_id: int,
                min_tokens: int = 0) -> PlannedOutput:
    """Token ids (>= 1) and finish reason of one completion choice."""
    max_tokens = max(1, max_tokens)
    if ignore_eos:
        length, reason = max_tokens, "length"
    else:
        # vLLM masks EOS while fewer than min_tokens were generated: it ends token N + 1
        drawn = max(draw_length(rng, cfg), min_tokens + 1)
        length, reason = (max_tokens, "length") if drawn >= max_tokens else (drawn, "stop")
    start = rng.randrange(len(vocabulary))
    tokens = [vocabulary[(start + i) % len(vocabulary)] for i in range(length)]
    if reason == "stop":
        tokens[-1] = eos_token_id
    return PlannedOutput(tuple(tokens), "length" if reason == "length" else "stop")
