"""KVCacheManager in the style of vLLM's tests/v1/core/test_prefix_caching.py."""

from __future__ import annotations

import pytest

from tests.workers.engine.engine_builders import free_ids, make_kv_cache_manager, make_request
from workers.engine.api import BlockRemoved, BlockStored
from workers.engine.block_hash import to_event_int


@pytest.mark.parametrize("algo", ["sha256", "sha256_cbor", "builtin"])
def test_prefill_hits_shared_prefix_and_frees_in_vllm_order(algo: str) -> None:
    manager = make_kv_cache_manager(num_blocks=11, algo=algo)
    common = list(range(48))                              # three full blocks
    req0 = make_request("0", common + [3] * 7)            # 55 tokens
    hit, num_hit = manager.get_computed_blocks(req0)
    assert hit == [] and num_hit == 0
    blocks = manager.allocate_slots(req0, 55, num_hit, hit)
    assert blocks is not None and [b.block_id for b in blocks] == [1, 2, 3, 4]
    assert [b.block_hash is not None for b in req0.blocks] == [True, True, True, False]
    req0.num_computed_tokens = 55

    req1 = make_request("1", common + [5] * 5)            # 53 tokens
    hit, num_hit = manager.get_computed_blocks(req1)
    assert [b.block_id for b in hit] == [1, 2, 3] and num_hit == 48
    blocks = manager.allocate_slots(req1, 5, num_hit, hit)
    assert blocks is not None and [b.block_id for b in blocks] == [5]
    assert [b.ref_cnt for b in req0.blocks] == [2, 2, 2, 1]
    assert free_ids(manager) == [6, 7, 8, 9, 10]
    assert manager.usage == pytest.approx(0.5)

    manager.free(req0)
    manager.free(req1)
    # Unhashed tails are reused first; the shared prefix goes to the tail, its head last.
    assert free_ids(manager) == [5, 4, 6, 7, 8, 9, 10, 3, 2, 1]
    assert manager.usage == 0.0


def test_cache_hit_is_capped_one_token_short_of_the_prompt() -> None:
    manager = make_kv_cache_manager()
    prompt = list(range(32))
    req0 = make_request("0", prompt)
    manager.allocate_slots(req0, 32)
    req1 = make_request("1", prompt)                      # identical 32-token prompt
    hit, num_hit = manager.get_computed_blocks(req1)
    assert [b.block_id for b in hit] == [1] and num_hit == 16   # last block recomputed
    blocks = manager.allocate_slots(req1, 16, num_hit, hit)
    assert blocks is not None and [b.block_id for b in blocks] == [3]


def test_allocation_fails_without_side_effects_when_blocks_run_out() -> None:
    manager = make_kv_cache_manager(num_blocks=5)
    req0 = make_request("0", list(range(40)))
    assert manager.allocate_slots(req0, 40) is not None       # 3 blocks of 4 usable
    req1 = make_request("1", list(range(100, 140)))
    assert manager.num_blocks_needed(req1, 40) == 3
    assert manager.allocate_slots(req1, 40) is None
    assert req1.blocks == [] and free_ids(manager) == [4]


def test_events_store_runs_with_parent_and_remove_on_eviction() -> None:
    manager = make_kv_cache_manager(num_blocks=4)
    req0 = make_request("0", list(range(40)))
    manager.allocate_slots(req0, 40)
    h = req0.block_hashes
    assert manager.block_pool.take_events() == [BlockStored(
        block_hashes=(to_event_int(h[0]), to_event_int(h[1])), parent_block_hash=None,
        token_ids=tuple(range(32)), block_size=16, extra_keys=(None, None))]
    manager.free(req0)
    assert free_ids(manager) == [3, 2, 1]
    req1 = make_request("1", list(range(16)) + [99] * 30)
    hit, num_hit = manager.get_computed_blocks(req1)
    assert [b.block_id for b in hit] == [1]
    assert manager.allocate_slots(req1, 30, num_hit, hit) is not None
    assert [b.block_id for b in req1.blocks] == [1, 3, 2]
    events = manager.block_pool.take_events()
    assert events[0] == BlockRemoved(block_hashes=(to_event_int(h[1]),))
    assert isinstance(events[1], BlockStored)
    assert events[1].parent_block_hash == to_event_int(h[0])


def test_decode_commits_a_block_when_its_last_token_is_scheduled() -> None:
    manager = make_kv_cache_manager()
    req = make_request("0", list(range(15)), num_output_tokens=5)
    manager.allocate_slots(req, 15)
    req.num_computed_tokens = 15
    req.num_output_tokens, req.num_tokens = 1, 16
    assert req.num_cached_blocks == 0
    manager.allocate_slots(req, 1)                         # computes token 15: block full
    assert req.num_cached_blocks == 1 and len(req.blocks) == 1
    assert req.block_hashes[0] is req.blocks[0].block_hash


def test_disabled_caching_never_hits() -> None:
    manager = make_kv_cache_manager(enable_caching=False)
    req0 = make_request("0", list(range(40)))
    manager.allocate_slots(req0, 40)
    assert manager.get_computed_blocks(make_request("1", list(range(40)))) == ([], 0)
