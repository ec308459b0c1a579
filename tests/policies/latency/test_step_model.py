"""The solved step model reproduces the engine's latency model."""

from __future__ import annotations

import pytest

from policies.latency.step_model import solve_coefficients
from workers.engine.latency import StepTimeModel
from workers.engine.profiles import A100_80GB, H100_80GB, L40S_48GB, LLAMA_3_8B, GpuProfile


@pytest.mark.parametrize("gpu", [H100_80GB, A100_80GB, L40S_48GB])
def test_probed_batches_are_exact_and_mixed_ones_close(gpu: GpuProfile) -> None:
    engine = StepTimeModel(gpu, LLAMA_3_8B)
    chunk = gpu.default_max_num_batched_tokens
    k = solve_coefficients(engine, chunk, gpu.default_max_num_seqs)
    assert k.step_s(1, 0, 1, 1) == pytest.approx(engine.step_time(1, 1, 0.0, 1, 1), rel=1e-4)
    assert k.step_s(chunk) == pytest.approx(engine.step_time(chunk, 1))
    assert k.step_s(chunk, chunk * 32768.0) == pytest.approx(
        engine.step_time(chunk, 1, chunk * 32768.0))
    # one 1984-token chunk plus 64 decodes at 1k context (the reference "mix" batch)
    mixed = engine.step_time(2048, 65, 1984 * 1984 / 2, 64, 64 * 1024)
    assert k.step_s(2048, 1984 * 1984 / 2, 65, 64 * 1024) == pytest.approx(mixed, rel=0.03)
    assert k.decode_step_s(128, 1024) == pytest.approx(engine.decode_time(128, 1024), rel=0.1)


def test_prefill_is_chunked_and_attention_makes_it_superlinear() -> None:
    k = solve_coefficients(StepTimeModel(A100_80GB, LLAMA_3_8B), 2048, 256)
    assert k.prefill_s(0) == 0.0
    assert k.prefill_s(4096) == pytest.approx(
        2 * k.step_s(2048) + k.per_pair_s * 4096 * 4096 / 2)
    assert k.prefill_s(32768) > 8 * k.prefill_s(4096)
    assert k.prefill_s(1024, cached_tokens=8192) > k.prefill_s(1024)


@pytest.mark.parametrize("gpu", [H100_80GB, A100_80GB, L40S_48GB])
def test_prefill_equals_its_chunked_steps_to_the_last_bit(gpu: GpuProfile) -> None:
    """The definition, step by step: full chunks, the last chunk, the attention pairs."""
    import random

    k = solve_coefficients(StepTimeModel(gpu, LLAMA_3_8B), gpu.default_max_num_batched_tokens,
                           gpu.default_max_num_seqs)
    chunk = float(k.max_batched_tokens)
    rng = random.Random(7)
    for _ in range(2000):
        new = rng.choice((1, 15, 16, int(chunk) - 1, int(chunk), int(chunk) + 1,
                          rng.randint(1, 200_000)))
        cached = rng.choice((0, 16, rng.randint(0, 100_000)))
        steps = -(-new // chunk)
        expected = ((steps - 1) * k.step_s(min(new, chunk)) + k.step_s(new - (steps - 1) * chunk)
                    + k.per_pair_s * (new * cached + new * new / 2.0))
        assert k.prefill_s(new, cached) == expected, (new, cached)
