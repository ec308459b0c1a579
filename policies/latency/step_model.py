"""A closed-form engine step time, solved once per (GPU, model, TP) from the engine's model.

Routing needs step times for thousands of candidate batches per second, so the roofline of
``workers.engine`` (``vllm-interface.md`` §5.3) is reduced to six coefficients by evaluating
it on a handful of batches:

    step = fixed + max(floor − fixed, per_token · N) + per_pair · Σ prefill (query, key) pairs
           + per_ctx_token · Σ decode contexts + per_seq · (sequences − 1)

``N`` is the batch's tokens (prefill chunk tokens plus one per decode). ``floor`` is a
one-sequence decode step (weights streamed once); ``per_token`` the compute-bound slope of
large prefill chunks; ``per_pair`` the prefill attention cost, which makes long prompts
quadratic. Each coefficient is read off the model by probing one batch against another, so
the form is exact on the probes and within a few per cent of the roofline elsewhere (the
knee of the roofline blend is where it differs most; see ``tests``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from workers.engine.latency import StepTimeModel
from workers.models import WorkerInfo

_REFERENCE_CONTEXT = 32_768
_SEQ_PROBE = 32


class StepTimer(Protocol):
    """The engine's latency model interface (``workers.engine.latency.StepTimeModel``)."""

    def step_time(self, num_tokens: int, num_seqs: int, prefill_attn_units: float = 0.0,
                  num_decodes: int = 0, decode_context_tokens: int = 0) -> float: ...


@dataclass(frozen=True, slots=True)
class StepCoefficients:
    fixed_s: float
    floor_s: float
    per_token_s: float
    per_pair_s: float
    per_ctx_token_s: float
    per_seq_s: float
    max_batched_tokens: int
    max_num_seqs: int
    # step_s(max_batched_tokens): one full prefill chunk, every chunk but a prompt's last
    _full_chunk_s: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_full_chunk_s", self.step_s(float(self.max_batched_tokens)))

    def step_s(self, tokens: float, prefill_pairs: float = 0.0, sequences: float = 1.0,
               decode_context: float = 0.0) -> float:
        """Seconds of one step with ``tokens`` batched tokens over ``sequences`` sequences."""
        linear = max(self.floor_s - self.fixed_s, self.per_token_s * tokens)
        return (self.fixed_s + linear + self.per_pair_s * prefill_pairs
                + self.per_ctx_token_s * decode_context
                + self.per_seq_s * max(0.0, sequences - 1.0))

    def decode_step_s(self, sequences: float, mean_context: float) -> float:
        """A pure decode step of ``sequences`` requests at ``mean_context`` tokens each."""
        n = max(1.0, sequences)
        return self.step_s(n, 0.0, n, n * mean_context)

    def prefill_s(self, new_tokens: float, cached_tokens: float = 0.0) -> float:
        """Compute seconds of one request's uncached prompt, chunked as the scheduler does
        (without queueing or decodes sharing the steps): every full chunk a
        ``step_s(max_batched_tokens)``, the last one a ``step_s`` of what is left, plus the
        prompt's attention over its cached prefix and itself."""
        if new_tokens <= 0:
            return 0.0
        chunk = self.max_batched_tokens
        steps = -(-new_tokens // chunk)
        base = self.floor_s - self.fixed_s
        # step_s(n) of a one-sequence chunk is fixed + max(base, per_token * n): its other
        # terms are 0.0, which leave a sum of non-negative floats unchanged to the last bit
        linear = self.per_token_s * (new_tokens - (steps - 1) * chunk)
        last = self.fixed_s + (linear if base < linear else base)
        pairs = new_tokens * cached_tokens + new_tokens * new_tokens / 2.0
        return (steps - 1) * self._full_chunk_s + last + self.per_pair_s * pairs


def solve_coefficients(timer: StepTimer, max_batched_tokens: int,
                       max_num_seqs: int) -> StepCoefficients:
    """Solve the coefficients from a step-time model by sampling a few batches."""
    chunk = max(64, max_batched_tokens)
    floor = timer.step_time(1, 1, 0.0, 1, 1)
    half = chunk // 2
    t_half, t_full = timer.step_time(half, 1), timer.step_time(chunk, 1)
    c = (t_full - t_half) / (chunk - half)          # compute-bound slope without attention
    a = t_full - c * chunk
    units = float(chunk) * _REFERENCE_CONTEXT
    per_pair = max(0.0, (timer.step_time(chunk, 1, units) - t_full) / units)
    long_context = timer.step_time(1, 1, 0.0, 1, 1 + _REFERENCE_CONTEXT)
    per_ctx = max(0.0, (long_context - floor) / _REFERENCE_CONTEXT)
    many = timer.step_time(_SEQ_PROBE, _SEQ_PROBE, 0.0, _SEQ_PROBE, _SEQ_PROBE)
    fixed = max(0.0, min(a, floor))
    per_token = max(c, 1e-12)
    linear_many = max(floor - fixed, per_token * _SEQ_PROBE)
    per_seq = max(0.0, (many - fixed - linear_many) / (_SEQ_PROBE - 1))
    return StepCoefficients(
        fixed_s=fixed, floor_s=max(floor, fixed), per_token_s=per_token, per_pair_s=per_pair,
        per_ctx_token_s=per_ctx, per_seq_s=per_seq, max_batched_tokens=chunk,
        max_num_seqs=max_num_seqs)


def coefficients_for_worker(info: WorkerInfo) -> StepCoefficients:
    """Coefficients of a fleet worker from its GPU profile through the engine's model, with
    its batch limits (the fleet file's, else vLLM's defaults for its GPU class)."""
    timer = StepTimeModel(info.gpu, info.model_spec, info.tensor_parallel)
    return solve_coefficients(
        timer, info.max_num_batched_tokens or info.gpu.default_max_num_batched_tokens,
        info.max_num_seqs or info.gpu.default_max_num_seqs)
