"""The block pool: every KV-cache block, the free queue and the prefix-cache index.

Mirrors ``vllm/v1/core/block_pool.py``. Block 0 is the null block and is never handed out,
so ``num_gpu_blocks - 1`` blocks are usable. Allocation pops from the front of the free
queue; a popped block that still carries a hash is evicted from the prefix cache (one
``BlockRemoved`` per hash). Freed blocks go to the tail when hashed (LRU) and to the front
when not. Cached-but-free blocks count as free, so usage is "blocks pinned by requests".
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from workers.engine.api import AllBlocksCleared, BlockRemoved, BlockStored, KVEvent
from workers.engine.block_hash import to_event_int
from workers.engine.kv_cache_utils import BlockHash, FreeKVCacheBlockQueue, KVCacheBlock


class BlockPool:
    """Owns the blocks. Invariant: a block is in the free queue iff its ref_cnt is 0.

    The prefix-cache index maps a hash to one block, or to a dict of blocks when the same
    content was computed twice concurrently (vLLM does not de-duplicate, so that block
    tables stay append-only).
    """

    def __init__(self, num_gpu_blocks: int, enable_caching: bool = True,
                 enable_kv_cache_events: bool = False, block_size: int = 16) -> None:
        if num_gpu_blocks < 2:
            raise ValueError(f"num_gpu_blocks must be at least 2, got {num_gpu_blocks}")
        self.num_gpu_blocks = num_gpu_blocks
        self.block_size = block_size
        self.enable_caching = enable_caching
        self.enable_kv_cache_events = enable_kv_cache_events
        self.blocks = [KVCacheBlock(i) for i in range(num_gpu_blocks)]
        self.free_block_queue = FreeKVCacheBlockQueue(self.blocks)
        self.cached_block_hash_to_block: dict[
            BlockHash, KVCacheBlock | dict[int, KVCacheBlock]] = {}
        self.null_block = self.free_block_queue.popleft()
        self.null_block.is_null = True
        self.kv_event_queue: list[KVEvent] = []
        # Bumped whenever a hash leaves the index: a cache hit found earlier is still a hit
        # (same blocks) as long as this has not changed.
        self.num_evictions = 0

    # -- prefix-cache index ------------------------------------------------------------

    def get_cached_block(self, block_hash: BlockHash) -> KVCacheBlock | None:
        """Any cached block with this hash, or None."""
        entry = self.cached_block_hash_to_block.get(block_hash)
        if entry is None or isinstance(entry, KVCacheBlock):
            return entry
        return next(iter(entry.values()))

    def _insert_duplicate(self, block_hash: BlockHash, block: KVCacheBlock) -> None:
        """Index a second block with an already indexed hash."""
        index = self.cached_block_hash_to_block
        entry = index[block_hash]
        if isinstance(entry, KVCacheBlock):
            index[block_hash] = {entry.block_id: entry, block.block_id: block}
        else:
            entry[block.block_id] = block

    def _pop_cached(self, block_hash: BlockHash, block: KVCacheBlock) -> bool:
        index = self.cached_block_hash_to_block
        entry = index.get(block_hash)
        if entry is None:
            return False
        if isinstance(entry, KVCacheBlock):
            if entry is not block:
                return False
            del index[block_hash]
            return True
        if entry.pop(block.block_id, None) is None:
            return False
        if len(entry) == 1:
            index[block_hash] = next(iter(entry.values()))
        return True

    def cache_full_blocks(self, block_hashes: Sequence[BlockHash], token_ids: Sequence[int],
                          blocks: Sequence[KVCacheBlock], num_cached_blocks: int,
                          num_full_blocks: int, lora_name: str | None = None,
                          lora_id: int | None = None,
                          event_keys: tuple[tuple[Any, ...] | None, tuple[Any, ...] | None] = (
                              None, None)) -> None:
        """Commit ``blocks[num_cached_blocks:num_full_blocks]`` to the prefix cache.

        ``block_hashes`` and ``token_ids`` are the request's; one ``BlockStored`` covers the
        newly cached run, with the previous block's hash as parent, the adapter's name and
        number, and each block's extra keys (``event_keys``: the first block's, the others').
        """
        if num_cached_blocks >= num_full_blocks:
            return
        index = self.cached_block_hash_to_block
        setdefault = index.setdefault
        # Blocks past num_cached_blocks were allocated for this request: never null, never
        # cached yet.
        for block, h in zip(blocks[num_cached_blocks:num_full_blocks],
                            block_hashes[num_cached_blocks:num_full_blocks], strict=True):
            block.block_hash = h
            if setdefault(h, block) is not block:
                self._insert_duplicate(h, block)
        if self.enable_kv_cache_events:
            bs = self.block_size
            parent = (to_event_int(block_hashes[num_cached_blocks - 1])
                      if num_cached_blocks > 0 else None)
            self.kv_event_queue.append(BlockStored(
                block_hashes=tuple(to_event_int(h)
                                   for h in block_hashes[num_cached_blocks:num_full_blocks]),
                parent_block_hash=parent,
                token_ids=tuple(token_ids[num_cached_blocks * bs:num_full_blocks * bs]),
                block_size=bs, lora_name=lora_name, lora_id=lora_id,
                extra_keys=tuple(event_keys[0] if i == 0 else event_keys[1]
                                 for i in range(num_cached_blocks, num_full_blocks))))

    # -- allocation --------------------------------------------------------------------

    def get_new_blocks(self, num_blocks: int) -> list[KVCacheBlock]:
        """Pop ``num_blocks`` from the front, evicting any that are still cached."""
        if num_blocks > self.free_block_queue.num_free_blocks:
            raise ValueError(f"Cannot get {num_blocks} free blocks from the pool")
        if not self.enable_caching or self.enable_kv_cache_events:
            blocks = self.free_block_queue.popleft_n(num_blocks)
            for block in blocks:
                if block.block_hash is not None:
                    self._maybe_evict_cached_block(block)
                block.ref_cnt += 1
            return blocks
        # popleft_n, eviction and the reference in one pass (the allocation hot path).
        queue = self.free_block_queue
        index = self.cached_block_hash_to_block
        blocks = []
        append = blocks.append
        evicted = 0
        curr = queue.fake_head.next_free_block
        for _ in range(num_blocks):
            assert curr is not None
            append(curr)
            h = curr.block_hash
            if h is not None:
                entry = index.pop(h, None)
                if entry is curr:
                    curr.block_hash = None
                    evicted += 1
                else:                          # a duplicated hash: the general path
                    if entry is not None:
                        index[h] = entry
                    self._maybe_evict_cached_block(curr)
            curr.ref_cnt = 1                   # a free block has no references
            # Its links go stale rather than being cleared: ref_cnt > 0 says "not free".
            curr = curr.next_free_block
        assert curr is not None
        queue.fake_head.next_free_block = curr
        curr.prev_free_block = queue.fake_head
        queue.num_free_blocks -= num_blocks
        self.num_evictions += evicted
        return blocks

    def _maybe_evict_cached_block(self, block: KVCacheBlock) -> bool:
        """Drop ``block``'s hash from the index (emitting BlockRemoved); False if uncached."""
        block_hash = block.block_hash
        if block_hash is None:
            return False
        block.block_hash = None
        if not self._pop_cached(block_hash, block):
            return False
        self.num_evictions += 1
        if self.enable_kv_cache_events:
            self.kv_event_queue.append(BlockRemoved(block_hashes=(to_event_int(block_hash),)))
        return True

    def touch(self, blocks: Iterable[KVCacheBlock]) -> None:
        """A cache hit: take free blocks out of the free queue and add a reference."""
        queue = self.free_block_queue
        for block in blocks:
            if block.ref_cnt == 0 and not block.is_null:
                queue.remove(block)
            block.ref_cnt += 1

    def free_blocks(self, ordered_blocks: Iterable[KVCacheBlock]) -> None:
        """Drop one reference from each block, in the order given (callers pass tail first).

        Blocks reaching zero with a hash are appended (FIFO reuse of cached blocks = LRU
        eviction); those without a hash are then prepended, in the order given (LIFO reuse
        of uncached blocks).
        """
        to_evict_first: list[KVCacheBlock] = []
        caching = self.enable_caching
        tail = self.free_block_queue.fake_tail
        last = tail.prev_free_block
        assert last is not None
        num_appended = 0
        for block in ordered_blocks:
            block.ref_cnt -= 1
            if not block.ref_cnt and not block.is_null:
                if block.block_hash is None or not caching:
                    to_evict_first.append(block)
                else:                                       # append to the tail, inlined
                    last.next_free_block = block
                    block.prev_free_block = last
                    last = block
                    num_appended += 1
        last.next_free_block = tail
        tail.prev_free_block = last
        self.free_block_queue.num_free_blocks += num_appended
        if to_evict_first:
            self.free_block_queue.prepend_n(to_evict_first)

    def reset_prefix_cache(self) -> bool:
        """Forget every cached hash; refused (False) while any block is in use."""
        if self.free_block_queue.num_free_blocks != self.num_gpu_blocks - 1:
            return False
        self.cached_block_hash_to_block = {}
        self.num_evictions += 1
        for block in self.blocks:
            block.block_hash = None
        if self.enable_kv_cache_events:
            self.kv_event_queue.append(AllBlocksCleared())
        return True

    # -- accounting ----------------------------------------------------------------------

    def get_num_free_blocks(self) -> int:
        return self.free_block_queue.num_free_blocks

    def get_usage(self) -> float:
        """``1 - free / (num_gpu_blocks - 1)``: cached-but-free blocks count as free."""
        return 1.0 - self.free_block_queue.num_free_blocks / (self.num_gpu_blocks - 1)

    def take_events(self) -> list[KVEvent]:
        """The events since the last call, in order; the queue is cleared."""
        events = self.kv_event_queue
        self.kv_event_queue = []
        return events
