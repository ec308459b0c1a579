"""The engine's public contract: what a caller (emulator, simulator) gives and gets back.

The engine is clock-free. The caller owns time: it calls ``EngineCore.step(now)``, which
schedules one batch starting at ``now`` and returns the batch's duration and the outputs
that become visible at ``now + duration``. The emulator sleeps that long on the wall clock
(scaled); the simulator advances a virtual clock.

The caller also decides what the request will generate (``output_token_ids``): the emulator
draws a length and token ids, the simulator takes them from a trace. The engine emits them
one per decode step and hashes them into blocks like vLLM does, so multi-turn reuse works.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from workers.engine.profiles import GpuProfile, ModelSpec

FinishReason = Literal["stop", "length", "abort"]


@dataclass(frozen=True, slots=True)
class EngineConfig:
    model: ModelSpec
    gpu: GpuProfile
    tensor_parallel: int = 1
    block_size: int = 16
    num_gpu_blocks: int | None = None        # None: derived from GPU memory as vLLM does
    gpu_memory_utilization: float = 0.92
    max_num_seqs: int | None = None          # None: the GPU class default (vLLM's)
    max_num_batched_tokens: int | None = None
    max_model_len: int | None = None         # None: model.max_model_len
    enable_prefix_caching: bool = True
    hash_algo: str = "sha256"                # "sha256" (pickle) or "sha256_cbor"
    hash_seed: str | None = None             # None: vLLM's fixed "vllm-none-hash"
    enable_kv_events: bool = False
    step_jitter: float = 0.0                 # lognormal sigma applied to step times
    seed: int = 0
    max_loras: int = 0                       # distinct LoRA adapters per batch (0: no limit)
    # admit a waiting request only when its whole prompt fits the free blocks, not only its
    # first chunk (vLLM's --scheduler-reserve-full-isl, on by default)
    scheduler_reserve_full_isl: bool = True


@dataclass(frozen=True, slots=True)
class EngineRequest:
    request_id: str
    prompt_token_ids: Sequence[int]
    output_token_ids: Sequence[int]          # what it will generate, len >= 1
    finish_reason: FinishReason = "length"   # reported when the last output token is emitted
    arrival_time: float = 0.0
    lora_name: str | None = None
    lora_path: str | None = None             # the adapter's path: vLLM hashes it with the name
    lora_id: int | None = None               # its number in the engine (vLLM's lora_int_id)
    cache_salt: str | None = None
    pooling: bool = False                    # an embedding: its one step makes no token


@dataclass(frozen=True, slots=True)
class RequestOutput:
    """New tokens of one request in one step (one per step once decoding)."""

    request_id: str
    new_token_ids: tuple[int, ...]
    first: bool                              # carries the request's first output token
    finished: bool
    finish_reason: FinishReason | None
    num_cached_tokens: int                   # prefix-cache hit tokens at first admission


@dataclass(frozen=True, slots=True)
class RequestStats:
    """Lifecycle timestamps of a finished request, in the caller's clock."""

    request_id: str
    arrival_time: float
    first_scheduled_time: float
    first_token_time: float
    finished_time: float
    num_prompt_tokens: int
    num_cached_tokens: int
    num_generation_tokens: int
    num_preemptions: int
    finish_reason: FinishReason
    token_times: tuple[float, ...] = ()      # emit time of every output token


@dataclass(frozen=True, slots=True)
class BlockStored:
    block_hashes: tuple[int, ...]            # lower 64 bits of each 32-byte hash, unsigned
    parent_block_hash: int | None
    token_ids: tuple[int, ...]
    block_size: int
    lora_name: str | None = None
    medium: str = "GPU"
    lora_id: int | None = None               # the adapter's number in its engine (lora_int_id)
    # per block, the untagged extra keys of its hash (the LoRA name, a first block's cache
    # salt), None for a block with none; None when the event did not say
    extra_keys: tuple[tuple[Any, ...] | None, ...] | None = None


@dataclass(frozen=True, slots=True)
class BlockRemoved:
    block_hashes: tuple[int, ...]
    medium: str = "GPU"


@dataclass(frozen=True, slots=True)
class AllBlocksCleared:
    pass


KVEvent = BlockStored | BlockRemoved | AllBlocksCleared


@dataclass(frozen=True, slots=True)
class StepResult:
    duration_s: float                        # 0.0 when nothing was scheduled
    outputs: tuple[RequestOutput, ...] = ()
    finished: tuple[RequestStats, ...] = ()
    kv_events: tuple[KVEvent, ...] = ()
    num_prefill_tokens: int = 0              # computed (uncached) prompt tokens this step
    num_decode_tokens: int = 0
    num_preemptions: int = 0


@dataclass(slots=True)
class EngineStats:
    """Gauges and counters with vLLM's semantics (§2 of vllm-interface.md)."""

    num_running: int = 0
    num_waiting: int = 0
    num_deferred: int = 0            # of num_waiting, skipped for the LoRA limit
    kv_cache_usage: float = 0.0
    prompt_tokens: int = 0
    prompt_cached_tokens: int = 0    # of prompt_tokens, found in the prefix cache (§2.2)
    generation_tokens: int = 0
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0
    num_preemptions: int = 0
    request_success: dict[str, int] = field(
        default_factory=lambda: {"stop": 0, "length": 0, "abort": 0, "error": 0, "repetition": 0})
