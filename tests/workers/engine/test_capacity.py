"""KV capacity derived from memory as vLLM does (vllm-interface.md §4.5)."""

from __future__ import annotations

import pytest

from workers.engine.capacity import bytes_per_block, derive_num_gpu_blocks, resolve_limits
from workers.engine.profiles import (
    A100_80GB,
    H100_80GB,
    L40S_48GB,
    LLAMA_3_8B,
    LLAMA_3_70B,
    GpuProfile,
)


def test_llama_8b_block_is_two_mib() -> None:
    assert bytes_per_block(LLAMA_3_8B, 16, 1) == 2 * 1024 * 1024
    assert bytes_per_block(LLAMA_3_70B, 16, 4) == 1280 * 1024


@pytest.mark.parametrize(("gpu", "expected", "tolerance"), [
    (H100_80GB, 29_200, 0.03), (A100_80GB, 29_200, 0.03), (L40S_48GB, 12_500, 0.06)])
def test_llama_8b_block_counts_match_vllm(gpu: GpuProfile, expected: int,
                                          tolerance: float) -> None:
    blocks = derive_num_gpu_blocks(gpu, LLAMA_3_8B)
    assert blocks == pytest.approx(expected, rel=tolerance)


def test_gpu_defaults_for_batch_limits() -> None:
    h100 = resolve_limits(H100_80GB, LLAMA_3_8B)
    a100 = resolve_limits(A100_80GB, LLAMA_3_8B)
    l40s = resolve_limits(L40S_48GB, LLAMA_3_8B)
    assert (h100.max_num_batched_tokens, h100.max_num_seqs) == (8192, 1024)
    assert (a100.max_num_batched_tokens, a100.max_num_seqs) == (2048, 256)
    assert (l40s.max_num_batched_tokens, l40s.max_num_seqs) == (2048, 256)
    assert h100.max_model_len == 8192


def test_max_model_len_shrinks_to_the_cache() -> None:
    limits = resolve_limits(H100_80GB, LLAMA_3_8B, num_gpu_blocks=101)
    assert limits.max_model_len == 1600


def test_model_that_does_not_fit_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="leaves no KV-cache memory on L40S-48GB"):
        derive_num_gpu_blocks(L40S_48GB, LLAMA_3_70B, tensor_parallel=1)


def test_more_blocks_than_the_memory_holds_are_refused() -> None:
    most = int(79.6 * 2**30 // bytes_per_block(LLAMA_3_8B, 16, 1))    # its 79.6 GiB
    assert resolve_limits(H100_80GB, LLAMA_3_8B, num_gpu_blocks=most).num_gpu_blocks == most
    with pytest.raises(ValueError, match=f"are more KV cache than H100-80GB's memory holds: "
                                         f"at most {most:,}"):
        resolve_limits(H100_80GB, LLAMA_3_8B, num_gpu_blocks=most + 1)
