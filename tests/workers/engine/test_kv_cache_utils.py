"""FreeKVCacheBlockQueue: O(1) linked-list operations keep exact order."""

from __future__ import annotations

import pytest

from workers.engine.kv_cache_utils import FreeKVCacheBlockQueue, KVCacheBlock


def ids(queue: FreeKVCacheBlockQueue) -> list[int]:
    return [b.block_id for b in queue.get_all_free_blocks()]


def test_queue_operations_keep_order_and_count() -> None:
    blocks = [KVCacheBlock(i) for i in range(6)]
    queue = FreeKVCacheBlockQueue(blocks)
    assert ids(queue) == [0, 1, 2, 3, 4, 5] and queue.num_free_blocks == 6
    assert queue.popleft().block_id == 0
    queue.remove(blocks[3])
    assert ids(queue) == [1, 2, 4, 5] and queue.num_free_blocks == 4
    assert [b.block_id for b in queue.popleft_n(2)] == [1, 2]
    queue.append_n([blocks[0], blocks[2]])
    queue.prepend_n([blocks[3], blocks[1]])
    assert ids(queue) == [3, 1, 4, 5, 0, 2] and queue.num_free_blocks == 6
    queue.remove(blocks[2])
    queue.append(blocks[2])
    assert ids(queue) == [3, 1, 4, 5, 0, 2]


def test_empty_queue_and_foreign_block_are_errors() -> None:
    queue = FreeKVCacheBlockQueue([KVCacheBlock(0)])
    queue.popleft()
    with pytest.raises(ValueError, match="No free blocks"):
        queue.popleft()
    with pytest.raises(ValueError, match="Cannot get 1 free blocks"):
        queue.popleft_n(1)
    with pytest.raises(RuntimeError, match="not in the free queue"):
        queue.remove(KVCacheBlock(9))
