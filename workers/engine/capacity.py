"""KV capacity and batch defaults, derived from GPU memory the way ``vllm serve`` does.

``num_gpu_blocks = (util × visible memory − weights − peak activations − non-torch) //
bytes_per_block`` (vllm-interface.md §4.5), with ``bytes_per_block = block_size × layers × 2
× (kv_heads / TP) × head_dim × dtype``. The activation peak is estimated from the profile
run vLLM does with ``max_num_batched_tokens`` tokens (MLP intermediates) and
``max_num_seqs`` fp32 logit rows. ``max_model_len`` shrinks to what the cache can hold.
"""

from __future__ import annotations

from dataclasses import dataclass

from workers.engine.api import EngineConfig
from workers.engine.profiles import GpuProfile, ModelSpec

GIB = 1 << 30
NON_TORCH_BYTES = GIB // 2       # cuBLAS workspace, NCCL buffers, CUDA graphs


@dataclass(frozen=True, slots=True)
class EngineLimits:
    """The resolved sizes of one engine."""

    num_gpu_blocks: int
    block_size: int
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int


def visible_memory_bytes(gpu: GpuProfile) -> float:
    """Memory the driver exposes: ``visible_memory_gb`` is GiB (nvidia-smi), else the
    datasheet's GB."""
    if gpu.visible_memory_gb is not None:
        return gpu.visible_memory_gb * GIB
    return gpu.memory_gb * 1e9


def bytes_per_block(model: ModelSpec, block_size: int, tensor_parallel: int) -> int:
    kv_heads_per_gpu = max(1, model.kv_heads // tensor_parallel)
    return block_size * model.layers * 2 * kv_heads_per_gpu * model.head_dim * model.dtype_bytes


def non_kv_bytes(model: ModelSpec, tensor_parallel: int, max_num_batched_tokens: int,
                 max_num_seqs: int) -> float:
    """Weights + profile-run activations + non-torch allocations, per GPU."""
    weights = model.total_params * model.dtype_bytes / tensor_parallel
    mlp = max_num_batched_tokens * (2 * model.ffn + 4 * model.hidden) * model.dtype_bytes
    logits = max_num_seqs * model.vocab * 4
    return weights + mlp / tensor_parallel + logits + NON_TORCH_BYTES


def derive_num_gpu_blocks(gpu: GpuProfile, model: ModelSpec, tensor_parallel: int = 1,
                          block_size: int = 16, gpu_memory_utilization: float = 0.92,
                          max_num_batched_tokens: int | None = None,
                          max_num_seqs: int | None = None) -> int:
    """The block count vLLM would report; a ValueError when the weights do not fit."""
    tokens = max_num_batched_tokens or gpu.default_max_num_batched_tokens
    seqs = max_num_seqs or gpu.default_max_num_seqs
    requested = gpu_memory_utilization * visible_memory_bytes(gpu)
    available = requested - non_kv_bytes(model, tensor_parallel, tokens, seqs)
    blocks = int(available // bytes_per_block(model, block_size, tensor_parallel))
    if blocks < 2:
        raise ValueError(
            f"{model.name} at TP{tensor_parallel} leaves no KV-cache memory on {gpu.name} "
            f"(gpu_memory_utilization={gpu_memory_utilization})")
    return blocks


def resolve_limits(gpu: GpuProfile, model: ModelSpec, tensor_parallel: int = 1,
                   block_size: int = 16, num_gpu_blocks: int | None = None,
                   gpu_memory_utilization: float = 0.92, max_num_seqs: int | None = None,
                   max_num_batched_tokens: int | None = None,
                   max_model_len: int | None = None) -> EngineLimits:
    """Fill every None with vLLM's default for this GPU class."""
    if block_size <= 0:
        raise ValueError(f"block_size must be positive, got {block_size}")
    seqs = max_num_seqs or gpu.default_max_num_seqs
    tokens = max_num_batched_tokens or gpu.default_max_num_batched_tokens
    blocks = num_gpu_blocks or derive_num_gpu_blocks(
        gpu, model, tensor_parallel, block_size, gpu_memory_utilization, tokens, seqs)
    if blocks < 2:
        raise ValueError(f"num_gpu_blocks must be at least 2, got {blocks}")
    # more blocks than the whole memory holds (weights aside) is a typo, and the engine
    # keeps a list of its free blocks: 10**11 of them ran the machine out of memory
    block_bytes = bytes_per_block(model, block_size, tensor_parallel)
    most = int(visible_memory_bytes(gpu) // block_bytes)
    if blocks > most:
        raise ValueError(
            f"num_gpu_blocks: {blocks:,} blocks of {block_bytes:,} bytes ({model.name}, "
            f"block_size {block_size}, TP{tensor_parallel}) are more KV cache than "
            f"{gpu.name}'s memory holds: at most {most:,}")
    model_len = min(max_model_len or model.max_model_len, (blocks - 1) * block_size)
    return EngineLimits(num_gpu_blocks=blocks, block_size=block_size, max_model_len=model_len,
                        max_num_seqs=seqs, max_num_batched_tokens=tokens)


def config_limits(config: EngineConfig) -> EngineLimits:
    """``resolve_limits`` for an engine's whole configuration (what ``EngineCore`` runs with)."""
    return resolve_limits(
        config.gpu, config.model, config.tensor_parallel, config.block_size,
        config.num_gpu_blocks, config.gpu_memory_utilization, config.max_num_seqs,
        config.max_num_batched_tokens, config.max_model_len)
