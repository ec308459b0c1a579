"""KV-cache block metadata and the free-block queue, in vLLM V1's vocabulary.

Mirrors ``vllm/v1/core/kv_cache_utils.py``: ``KVCacheBlock`` carries its id, reference count
and (when full and cached) its hash; ``FreeKVCacheBlockQueue`` is an intrusive doubly linked
list with fake head and tail, so that taking a block out of the middle (a prefix-cache hit on
a free block) is O(1).
"""

from __future__ import annotations

from collections.abc import Iterable

# A block hash: vLLM's bytes, or (``builtin`` algo inside one process) its integer value.
BlockHash = bytes | int


class KVCacheBlock:
    """KV-cache block metadata. ``block_hash`` is set only while the block is full and cached."""

    __slots__ = ("block_hash", "block_id", "is_null", "next_free_block", "prev_free_block",
                 "ref_cnt")

    def __init__(self, block_id: int) -> None:
        # Block ID, ranging from 0 to num_gpu_blocks - 1.
        self.block_id = block_id
        # Reference count: running requests holding the block.
        self.ref_cnt = 0
        # The hash of the block, only available when the block is full and cached.
        self.block_hash: BlockHash | None = None
        # Links of the free list; only FreeKVCacheBlockQueue touches them.
        self.prev_free_block: KVCacheBlock | None = None
        self.next_free_block: KVCacheBlock | None = None
        # The null block (id 0) is never allocated.
        self.is_null = False

    def __repr__(self) -> str:
        return f"KVCacheBlock(id={self.block_id}, ref_cnt={self.ref_cnt})"


class FreeKVCacheBlockQueue:
    """The free blocks in eviction order: the front is reused (and evicted) first.

    Blocks freed with a hash are appended (evicted last, LRU); blocks freed without one are
    prepended (reused first). A cache hit on a free block removes it from the middle.
    """

    __slots__ = ("fake_head", "fake_tail", "num_free_blocks")

    def __init__(self, blocks: list[KVCacheBlock]) -> None:
        self.num_free_blocks = len(blocks)
        self.fake_head = KVCacheBlock(-1)
        self.fake_tail = KVCacheBlock(-1)
        prev = self.fake_head
        for block in blocks:
            prev.next_free_block = block
            block.prev_free_block = prev
            prev = block
        prev.next_free_block = self.fake_tail
        self.fake_tail.prev_free_block = prev

    def popleft(self) -> KVCacheBlock:
        """Take the front block; ValueError when the queue is empty."""
        block = self.fake_head.next_free_block
        if block is None or block is self.fake_tail:
            raise ValueError("No free blocks available")
        self.remove(block)
        return block

    def popleft_n(self, n: int) -> list[KVCacheBlock]:
        """Take the ``n`` front blocks in order; the caller checks that there are enough."""
        if n > self.num_free_blocks:
            raise ValueError(f"Cannot get {n} free blocks from the queue")
        blocks: list[KVCacheBlock] = []
        append = blocks.append
        curr = self.fake_head.next_free_block
        for _ in range(n):
            assert curr is not None
            append(curr)
            nxt = curr.next_free_block
            curr.prev_free_block = curr.next_free_block = None
            curr = nxt
        self.fake_head.next_free_block = curr
        assert curr is not None
        curr.prev_free_block = self.fake_head
        self.num_free_blocks -= n
        return blocks

    def remove(self, block: KVCacheBlock) -> None:
        """Unlink ``block`` from wherever it is in the queue."""
        prev, nxt = block.prev_free_block, block.next_free_block
        if prev is None or nxt is None:
            raise RuntimeError(f"remove() called on a block not in the free queue: {block}")
        prev.next_free_block = nxt
        nxt.prev_free_block = prev
        block.prev_free_block = block.next_free_block = None
        self.num_free_blocks -= 1

    def append(self, block: KVCacheBlock) -> None:
        self.append_n((block,))

    def append_n(self, blocks: Iterable[KVCacheBlock]) -> None:
        """Put ``blocks`` at the tail, in the given order."""
        tail = self.fake_tail
        last = tail.prev_free_block
        assert last is not None
        count = 0
        for block in blocks:
            last.next_free_block = block
            block.prev_free_block = last
            last = block
            count += 1
        last.next_free_block = tail
        tail.prev_free_block = last
        self.num_free_blocks += count

    def prepend_n(self, blocks: Iterable[KVCacheBlock]) -> None:
        """Put ``blocks`` at the front, keeping their order (the first becomes the front)."""
        head = self.fake_head
        first = head.next_free_block
        assert first is not None
        prev = head
        count = 0
        for block in blocks:
            prev.next_free_block = block
            block.prev_free_block = prev
            prev = block
            count += 1
        prev.next_free_block = first
        first.prev_free_block = prev
        self.num_free_blocks += count

    def get_all_free_blocks(self) -> list[KVCacheBlock]:
        """Every free block, front to tail (for tests and debugging)."""
        out: list[KVCacheBlock] = []
        curr = self.fake_head.next_free_block
        while curr is not None and curr is not self.fake_tail:
            out.append(curr)
            curr = curr.next_free_block
        return out
