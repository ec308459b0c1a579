"""Builders shared by the engine tests (vLLM's test_prefix_caching.py style)."""

from __future__ import annotations

from collections.abc import Sequence

from workers.engine.api import EngineRequest
from workers.engine.block_hash import get_hash_function, none_hash
from workers.engine.block_pool import BlockPool
from workers.engine.kv_cache_manager import KVCacheManager
from workers.engine.request import BlockHasher, Request


def make_request(request_id: str, prompt_token_ids: Sequence[int],
                 num_output_tokens: int = 4, max_model_len: int = 4096,
                 arrival_time: float = 0.0, lora_name: str | None = None) -> Request:
    req = EngineRequest(request_id=request_id, prompt_token_ids=list(prompt_token_ids),
                        output_token_ids=[7] * num_output_tokens, arrival_time=arrival_time,
                        lora_name=lora_name)
    return Request(req, max_model_len)


def make_kv_cache_manager(num_blocks: int = 11, block_size: int = 16, algo: str = "sha256",
                          enable_kv_events: bool = True,
                          enable_caching: bool = True) -> KVCacheManager:
    pool = BlockPool(num_blocks, enable_caching=enable_caching,
                     enable_kv_cache_events=enable_kv_events, block_size=block_size)
    hasher = BlockHasher(get_hash_function(algo), none_hash(algo), block_size)
    return KVCacheManager(pool, hasher, max_model_len=4096)


def free_ids(manager: KVCacheManager) -> list[int]:
    return [b.block_id for b in manager.block_pool.free_block_queue.get_all_free_blocks()]
