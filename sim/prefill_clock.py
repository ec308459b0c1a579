"""A prompt's prefill time on an idle H100, the yardstick of the TTFT objective.

Measured with the engine itself: a private, idle ``EngineCore`` on the H100 profile (prefix
caching off) is stepped until the prompt's first token, so chunked prefill and the step
overhead count exactly as the simulated workers count them. Results are memoised by length.
"""

from __future__ import annotations

from workers.engine.api import EngineConfig, EngineRequest
from workers.engine.core import EngineCore
from workers.engine.profiles import H100_80GB, GpuProfile, ModelSpec


class PrefillClock:
    __slots__ = ("_engine", "_memo", "_serial")

    def __init__(self, model: ModelSpec, gpu: GpuProfile = H100_80GB) -> None:
        self._engine = EngineCore(EngineConfig(model=model, gpu=gpu, hash_algo="builtin",
                                               enable_prefix_caching=False))
        self._memo: dict[int, float] = {}
        self._serial = 0

    def prefill_s(self, prompt_tokens: int) -> float:
        """Seconds from arrival to first token for ``prompt_tokens`` on the idle GPU."""
        known = self._memo.get(prompt_tokens)
        if known is not None:
            return known
        self._serial += 1
        request_id = f"prefill-{self._serial}"
        self._engine.add_request(EngineRequest(
            request_id=request_id, prompt_token_ids=[0] * max(1, prompt_tokens),
            output_token_ids=[0]))
        elapsed = 0.0
        while self._engine.has_unfinished_requests():
            result = self._engine.step(elapsed)
            elapsed += result.duration_s
            if result.duration_s <= 0 and not result.outputs:
                raise RuntimeError(f"idle engine cannot prefill {prompt_tokens} tokens")
        self._memo[prompt_tokens] = elapsed
        return elapsed
