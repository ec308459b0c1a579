"""The KV-cache manager: prefix lookup, slot allocation and freeing for one request.

Mirrors ``vllm/v1/core/kv_cache_manager.py`` for a single full-attention group. The block
table of a request lives on the request (``Request.blocks``); ``num_cached_blocks`` counts
its leading blocks already committed to the prefix cache.

Token regions of a request at ``allocate_slots``::

    | < computed > | < new computed (cache hit) > | < new (to compute) > |
                   |      touched blocks          |  newly allocated     |
"""

from __future__ import annotations

from workers.engine.block_pool import BlockPool
from workers.engine.kv_cache_utils import BlockHash, KVCacheBlock
from workers.engine.request import BlockHasher, Request


class KVCacheManager:
    """Allocation returns None (never raises) when blocks run out, so the scheduler can
    preempt; capacity problems are normal control flow."""

    def __init__(self, block_pool: BlockPool, hasher: BlockHasher, max_model_len: int) -> None:
        self.block_pool = block_pool
        self.hasher = hasher
        self.block_size = block_pool.block_size
        self.max_model_len = max_model_len
        self.enable_caching = block_pool.enable_caching

    @property
    def usage(self) -> float:
        return self.block_pool.get_usage()

    def get_computed_blocks(self, request: Request) -> tuple[list[KVCacheBlock], int]:
        """The longest cached prefix: (hit blocks, hit tokens), capped at num_tokens - 1
        so that the last token is always recomputed to produce logits."""
        if not self.enable_caching:
            return [], 0
        max_hit_blocks = (request.num_tokens - 1) // self.block_size
        self.hasher.extend(request, max_hit_blocks)
        evictions = self.block_pool.num_evictions
        if request.probe_evictions == evictions:
            # Nothing left the cache since the last probe: those hits stand; look further.
            blocks = self.find_longest_cache_hit(request.block_hashes, max_hit_blocks,
                                                 list(request.probe_hits))
        else:
            blocks = self.find_longest_cache_hit(request.block_hashes, max_hit_blocks)
        request.probe_evictions = evictions
        request.probe_hits = blocks
        return blocks, len(blocks) * self.block_size

    def find_longest_cache_hit(self, block_hashes: list[BlockHash], max_blocks: int,
                               known_hits: list[KVCacheBlock] | None = None,
                               ) -> list[KVCacheBlock]:
        """Cached blocks for ``block_hashes[:max_blocks]``, stopping at the first miss;
        ``known_hits`` are leading hits already found (the walk continues after them)."""
        pool = self.block_pool
        index = pool.cached_block_hash_to_block
        hits: list[KVCacheBlock] = known_hits if known_hits is not None else []
        for i in range(len(hits), min(max_blocks, len(block_hashes))):
            entry = index.get(block_hashes[i])
            if entry is None:
                break
            hits.append(entry if isinstance(entry, KVCacheBlock)
                        else pool.get_cached_block(block_hashes[i]))  # type: ignore[arg-type]
        return hits

    def num_blocks_needed(self, request: Request, num_new_tokens: int,
                          num_new_computed_tokens: int = 0,
                          new_computed_blocks: list[KVCacheBlock] | None = None) -> int:
        """Free-queue blocks that ``allocate_slots`` with these arguments would consume."""
        hit = new_computed_blocks or ()
        num_tokens = min(request.num_computed_tokens + num_new_computed_tokens + num_new_tokens,
                         self.max_model_len)
        required = -(-num_tokens // self.block_size)
        new = required - len(request.blocks) - len(hit)
        evictable = sum(1 for b in hit if b.ref_cnt == 0 and not b.is_null)
        return max(new, 0) + evictable

    def allocate_slots(self, request: Request, num_new_tokens: int,
                       num_new_computed_tokens: int = 0,
                       new_computed_blocks: list[KVCacheBlock] | None = None,
                       full_sequence_must_fit: bool = False,
                       ) -> list[KVCacheBlock] | None:
        """Give ``request`` room for ``num_new_tokens`` more tokens after its computed and
        newly hit ones; commit the blocks that become full to the prefix cache.

        Returns the newly allocated blocks, or None when the free queue is too short: for
        these tokens or, with ``full_sequence_must_fit`` (the admission gate), for all of
        the request's tokens.
        """
        pool = self.block_pool
        bs = self.block_size
        hit = new_computed_blocks or []
        if full_sequence_must_fit and self.num_blocks_needed(
                request, request.num_tokens - request.num_computed_tokens
                - num_new_computed_tokens, num_new_computed_tokens,
                hit) > pool.free_block_queue.num_free_blocks:
            return None
        num_computed = request.num_computed_tokens + num_new_computed_tokens
        num_tokens_need_slot = min(num_computed + num_new_tokens, self.max_model_len)
        num_new_blocks = -(-num_tokens_need_slot // bs) - len(request.blocks) - len(hit)
        if num_new_blocks < 0:
            num_new_blocks = 0
        if hit:
            evictable = 0
            for b in hit:
                if b.ref_cnt == 0 and not b.is_null:
                    evictable += 1
            if num_new_blocks + evictable > pool.free_block_queue.num_free_blocks:
                return None
            pool.touch(hit)
            request.blocks.extend(hit)
            request.num_cached_blocks = len(request.blocks)
        elif num_new_blocks > pool.free_block_queue.num_free_blocks:
            return None
        new_blocks = pool.get_new_blocks(num_new_blocks) if num_new_blocks else []
        if new_blocks:
            request.blocks.extend(new_blocks)
        if self.enable_caching:
            num_full = min(num_computed + num_new_tokens, request.num_tokens) // bs
            if num_full > request.num_cached_blocks:
                self.hasher.extend(request, num_full)
                pool.cache_full_blocks(request.block_hashes, request.all_token_ids,
                                       request.blocks, request.num_cached_blocks, num_full,
                                       request.lora_name, request.lora_id, request.event_keys)
                request.num_cached_blocks = num_full
        return new_blocks

    def free(self, request: Request) -> None:
        """Release the request's blocks, tail first, so its head stays cached longest."""
        blocks = request.blocks
        if blocks:
            self.block_pool.free_blocks(reversed(blocks))
        request.blocks = []
        request.num_cached_blocks = 0
