"""Idle-H100 prefill time: chunked like the engine, priced by its step-time model."""

from __future__ import annotations

import pytest

from sim.prefill_clock import PrefillClock
from workers.engine.latency import StepTimeModel
from workers.engine.profiles import BUILTIN_MODELS, H100_80GB

MODEL = BUILTIN_MODELS["llama-3.1-8b"]


def test_long_prompt_is_the_sum_of_its_8192_token_chunks() -> None:
    steps = StepTimeModel(H100_80GB, MODEL)
    expected = (steps.prefill_time(8192, 0) + steps.prefill_time(8192, 8192)
                + steps.prefill_time(3616, 16384))
    assert PrefillClock(MODEL).prefill_s(20_000) == pytest.approx(expected, rel=1e-12)


def test_short_prompt_is_one_step_and_memoised() -> None:
    clock = PrefillClock(MODEL)
    first = clock.prefill_s(512)
    assert first == StepTimeModel(H100_80GB, MODEL).prefill_time(512, 0)
    assert clock.prefill_s(512) is first
