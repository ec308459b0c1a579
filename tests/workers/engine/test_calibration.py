"""The calibration table's measurements through EngineCore."""

from __future__ import annotations

import pytest

from workers.engine.calibration import (
    REFERENCE_MS,
    CalibrationRow,
    markdown,
    measure_decode_ms,
    measure_ttft_ms,
)


def test_h100_8b_measurements_reproduce_the_reference_table() -> None:
    reference = REFERENCE_MS[("llama-3.1-8b", "h100", 1)]
    assert measure_decode_ms("llama-3.1-8b", "h100", 1, 32) == pytest.approx(reference[1],
                                                                          rel=0.02)
    assert measure_ttft_ms("llama-3.1-8b", "h100", 1, 2048) == pytest.approx(reference[4],
                                                                          rel=0.02)


def test_a_batch_that_does_not_fit_the_cache_is_not_measured() -> None:
    assert measure_decode_ms("llama-3.1-70b", "l40s", 4, 128) is None


def test_markdown_shows_measured_and_reference_values() -> None:
    row = CalibrationRow(model="m", gpu="g", tp=1, num_gpu_blocks=1234,
                         decode_ms=(1.0, None, 3.0), ttft_ms=(4.0, 5.0, 6.0),
                         reference_ms=(1, 2, 3, 4, 5, 6))
    assert markdown([row]).splitlines()[2] == (
        "| m | g | 1 | 1,234 | 1.0 (1) | – (2) | 3.0 (3) | 4.0 (4) | 5.0 (5) | 6.0 (6) |")
