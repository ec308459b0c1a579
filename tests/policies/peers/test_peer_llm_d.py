from __future__ import annotations

from policies.base import CycleState
from policies.peers.block_lru_index import BlockLruIndex
from policies.peers.llm_d import (
    KvCacheUtilizationScorer,
    PrefixCacheParams,
    PrefixCacheScorer,
    QueueScorer,
)
from tests.policies.peers.peer_fixtures import make_request, make_view, routed


def test_queue_scorer_is_min_max_over_waiting() -> None:
    views = [make_view("a", waiting=2), make_view("b", waiting=6), make_view("c", waiting=4)]
    assert QueueScorer().score(make_request(), views, CycleState()) == {
        "a": 1.0, "b": 0.0, "c": 0.5}
    same = [make_view("a", waiting=3), make_view("b", waiting=3)]
    assert QueueScorer().score(make_request(), same, CycleState()) == {"a": 1.0, "b": 1.0}


def test_kv_scorer_is_one_minus_usage() -> None:
    views = [make_view("a", kv_usage=0.25), make_view("b", kv_usage=1.0)]
    assert KvCacheUtilizationScorer().score(make_request(), views, CycleState()) == {
        "a": 0.75, "b": 0.0}


def test_prefix_scorer_counts_matched_blocks_over_total() -> None:
    scorer = PrefixCacheScorer(PrefixCacheParams(block_size_tokens=4))
    first = make_request("1", tokens=range(12))                      # 3 full blocks
    scorer.on_routed(first, routed(first, "a"))
    views = [make_view("a"), make_view("b")]
    second = make_request("2", tokens=[*range(8), 99, 99, 99, 99, 5, 5, 5, 5, 1])  # 4 blocks
    assert scorer.score(second, views, CycleState()) == {"a": 0.5, "b": 0.0}


def test_weighted_default_blend_hand_computed() -> None:
    # a: queue 1.0, kv 0.2, prefix 0.5 → 2 + 0.4 + 1.5 = 3.9
    # b: queue 0.0, kv 0.9, prefix 0.0 → 0 + 1.8 + 0   = 1.8
    scorer = PrefixCacheScorer(PrefixCacheParams(block_size_tokens=4))
    seed = make_request("1", tokens=range(8))
    scorer.on_routed(seed, routed(seed, "a"))
    views = [make_view("a", waiting=0, kv_usage=0.8), make_view("b", waiting=5, kv_usage=0.1)]
    request = make_request("2", tokens=range(16))
    cycle = CycleState()
    totals = {v.id: 2 * QueueScorer().score(request, views, cycle)[v.id]
              + 2 * KvCacheUtilizationScorer().score(request, views, cycle)[v.id]
              + 3 * scorer.score(request, views, cycle)[v.id] for v in views}
    assert {k: round(v, 6) for k, v in totals.items()} == {"a": 3.9, "b": 1.8}


def test_lru_index_greedy_match_and_capacity() -> None:
    index = BlockLruIndex(capacity_per_server=3)
    index.add([1, 2, 3], "a")
    index.add([1, 2], "b")
    assert index.match_blocks([1, 2, 3, 4]) == {"a": 3, "b": 2}
    index.add([7], "a")                           # evicts a's least recent hash (1)
    assert index.blocks_held("a") == 3
    assert index.match_blocks([1, 2, 3]) == {"b": 2, "a": 2}
