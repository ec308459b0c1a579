"""Step-time model against the worked table of vllm-interface.md §5.4 (reference script)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from workers.engine.latency import StepTimeModel
from workers.engine.profiles import (
    A100_80GB,
    H100_80GB,
    L40S_48GB,
    LLAMA_3_8B,
    LLAMA_3_70B,
    GpuProfile,
    ModelSpec,
)

REFERENCE = (Path(__file__).resolve().parents[3] / ".." / "shared" / "reference"
             / "timing-model-reference.py")


def load_reference() -> ModuleType:
    if not REFERENCE.exists():
        pytest.skip("shared reference material not present")
    spec = importlib.util.spec_from_file_location("timing_reference", REFERENCE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CASES = [
    (H100_80GB, "H100", LLAMA_3_8B, "llama3-8b", 1),
    (L40S_48GB, "L40S", LLAMA_3_8B, "llama3-8b", 1),
    (H100_80GB, "H100", LLAMA_3_70B, "llama3-70b", 4),
    (H100_80GB, "H100", LLAMA_3_70B, "llama3-70b", 8),
    (L40S_48GB, "L40S", LLAMA_3_70B, "llama3-70b", 4),
]


@pytest.mark.parametrize(("gpu", "ref_gpu", "model", "ref_model", "tp"), CASES)
def test_matches_reference_script_where_constants_agree(
        gpu: GpuProfile, ref_gpu: str, model: ModelSpec, ref_model: str, tp: int) -> None:
    # The reference uses k = 1.2 for every GPU; these profiles use 1.2 too (A100 uses 1.3).
    ref = load_reference()
    time_model = StepTimeModel(gpu, model, tp)
    batches = [
        ((), (1024,)), ((), (1024,) * 32), ((), (1024,) * 128), (((512, 0),), ()),
        (((2048, 0),), ()), (((8192, 0),), ()), (((1984, 0),), (1024,) * 64),
        (((256, 1000), (100, 0)), (3000, 17)),
    ]
    for prefill, decode in batches:
        expected_ms = ref.step_ms(ref_gpu, ref_model, tp, prefill=list(prefill),
                                  decode=list(decode))
        n = sum(p[0] for p in prefill) + len(decode)
        got = time_model.step_time(
            n, len(prefill) + len(decode), sum(a * b + a * a / 2 for a, b in prefill),
            len(decode), sum(decode))
        assert got * 1e3 == pytest.approx(expected_ms, rel=1e-9), (prefill, decode)


def test_a100_uses_its_fitted_knee_and_stays_near_the_table() -> None:
    time_model = StepTimeModel(A100_80GB, LLAMA_3_8B)
    assert time_model.k == 1.3
    assert time_model.prefill_time(2048) == pytest.approx(0.146, rel=0.03)
    assert time_model.decode_time(1, 1024) == pytest.approx(0.0105, rel=0.03)


def test_empty_batch_costs_nothing_and_cached_prefix_costs_attention() -> None:
    time_model = StepTimeModel(H100_80GB, LLAMA_3_8B)
    assert time_model.step_time(0, 0) == 0.0
    assert time_model.prefill_time(512, 4096) > time_model.prefill_time(512, 0)
    assert time_model.decode_time(8, 4096) > time_model.decode_time(8, 512)


def test_tensor_parallel_needs_an_allreduce_bandwidth() -> None:
    with pytest.raises(ValueError, match="no all-reduce bandwidth for tensor_parallel=3"):
        StepTimeModel(H100_80GB, LLAMA_3_70B, 3)
    with pytest.raises(ValueError, match="tensor_parallel must be >= 1"):
        StepTimeModel(H100_80GB, LLAMA_3_8B, 0)
