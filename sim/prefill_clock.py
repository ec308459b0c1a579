"""A prompt's prefill time on an idle H100, the yardstick of the TTFT objective.

Computed with the engine's own step-time model (``workers.engine.latency.StepTimeModel``)
and the GPU's default chunking: an idle engine prefills a prompt in chunks of
``max_num_batched_tokens`` (8,192 on H100), chunk ``k`` attending over the ``k - 1`` chunks
before it, and emits the first token when the last chunk's step ends. Memoised by length.
"""

from __future__ import annotations

from workers.engine.latency import StepTimeModel
from workers.engine.profiles import H100_80GB, GpuProfile, ModelSpec


class PrefillClock:
    __slots__ = ("_chunk", "_memo", "_model")

    def __init__(self, model: ModelSpec, gpu: GpuProfile = H100_80GB,
                 max_num_batched_tokens: int | None = None) -> None:
        self._model = StepTimeModel(gpu, model)
        self._chunk = max_num_batched_tokens or gpu.default_max_num_batched_tokens
        self._memo: dict[int, float] = {}

    def prefill_s(self, prompt_tokens: int) -> float:
        """Seconds from arrival to first token for ``prompt_tokens`` on the idle GPU."""
        known = self._memo.get(prompt_tokens)
        if known is not None:
            return known
        elapsed = 0.0
        done = 0
        while done < prompt_tokens:
            chunk = min(self._chunk, prompt_tokens - done)
            elapsed += self._model.prefill_time(chunk, done)
            done += chunk
        self._memo[prompt_tokens] = elapsed
        return elapsed
