"""BlockPool: null block, pop order, eviction events, LRU tail, reverse free order."""

from __future__ import annotations

from workers.engine.api import AllBlocksCleared, BlockRemoved, BlockStored
from workers.engine.block_hash import block_hash_chain, to_event_int
from workers.engine.block_pool import BlockPool


def free_ids(pool: BlockPool) -> list[int]:
    return [b.block_id for b in pool.free_block_queue.get_all_free_blocks()]


def test_null_block_is_never_handed_out() -> None:
    pool = BlockPool(5, block_size=4)
    assert pool.null_block.block_id == 0 and pool.null_block.is_null
    assert free_ids(pool) == [1, 2, 3, 4]
    assert [b.block_id for b in pool.get_new_blocks(4)] == [1, 2, 3, 4]
    assert pool.get_num_free_blocks() == 0 and pool.get_usage() == 1.0


def test_free_puts_hashed_blocks_at_tail_and_unhashed_at_front() -> None:
    pool = BlockPool(8, block_size=2, enable_kv_cache_events=True)
    blocks = pool.get_new_blocks(3)                       # ids 1, 2, 3
    tokens = [1, 2, 3, 4, 5]
    hashes = block_hash_chain(tokens, 2)
    pool.cache_full_blocks(hashes, tokens, blocks, 0, 2)  # blocks 1 and 2 full
    pool.free_blocks(reversed(blocks))
    assert free_ids(pool) == [3, 4, 5, 6, 7, 2, 1]
    assert pool.get_usage() == 0.0
    assert pool.take_events() == [BlockStored(
        block_hashes=(to_event_int(hashes[0]), to_event_int(hashes[1])),
        parent_block_hash=None, token_ids=(1, 2, 3, 4), block_size=2,
        extra_keys=(None, None))]
    assert pool.take_events() == []


def test_popping_a_cached_block_evicts_it_with_one_event_per_hash() -> None:
    pool = BlockPool(4, block_size=2, enable_kv_cache_events=True)
    blocks = pool.get_new_blocks(2)
    hashes = block_hash_chain([1, 2, 3, 4], 2)
    pool.cache_full_blocks(hashes, [1, 2, 3, 4], blocks, 0, 2)
    pool.free_blocks(reversed(blocks))
    pool.take_events()
    assert free_ids(pool) == [3, 2, 1]
    assert pool.get_cached_block(hashes[1]) is blocks[1]
    got = pool.get_new_blocks(2)                          # 3 (uncached), then 2 (evicted)
    assert [b.block_id for b in got] == [3, 2]
    assert pool.get_cached_block(hashes[1]) is None
    assert pool.get_cached_block(hashes[0]) is blocks[0]
    assert pool.take_events() == [BlockRemoved(block_hashes=(to_event_int(hashes[1]),))]


def test_touch_takes_a_free_cached_block_out_of_the_queue() -> None:
    pool = BlockPool(4, block_size=2)
    blocks = pool.get_new_blocks(1)
    pool.cache_full_blocks(block_hash_chain([1, 2], 2), [1, 2], blocks, 0, 1)
    pool.free_blocks(blocks)
    assert free_ids(pool) == [2, 3, 1]
    pool.touch(blocks)
    assert free_ids(pool) == [2, 3] and blocks[0].ref_cnt == 1
    pool.touch(blocks)
    assert blocks[0].ref_cnt == 2 and pool.get_num_free_blocks() == 2


def test_duplicate_content_is_indexed_twice_and_evicted_separately() -> None:
    pool = BlockPool(4, block_size=2, enable_kv_cache_events=True)
    h = block_hash_chain([9, 9], 2)
    a, b = pool.get_new_blocks(2)
    pool.cache_full_blocks(h, [9, 9], [a], 0, 1)
    pool.cache_full_blocks(h, [9, 9], [b], 0, 1)
    pool.free_blocks([a, b])
    pool.take_events()
    assert [x.block_id for x in pool.get_new_blocks(2)] == [3, 1]
    assert pool.get_cached_block(h[0]) is b
    assert pool.take_events() == [BlockRemoved(block_hashes=(to_event_int(h[0]),))]


def test_reset_prefix_cache_only_when_idle() -> None:
    pool = BlockPool(4, block_size=2, enable_kv_cache_events=True)
    blocks = pool.get_new_blocks(1)
    pool.cache_full_blocks(block_hash_chain([1, 2], 2), [1, 2], blocks, 0, 1)
    assert pool.reset_prefix_cache() is False
    pool.free_blocks(blocks)
    pool.take_events()
    assert pool.reset_prefix_cache() is True
    assert pool.cached_block_hash_to_block == {} and blocks[0].block_hash is None
    assert pool.take_events() == [AllBlocksCleared()]
