"""The prefix scorer: approximate index learnt from routing, exact KV-event index first."""

from __future__ import annotations

from policies.base import CycleState, Decision, RoutingRequest
from policies.cycle_keys import worker_attributes
from policies.prefix.matching import cached_tokens
from policies.scorers.prefix import PrefixScorer, PrefixScorerParams
from tests.policies.conftest import make_view
from workers.engine.api import BlockStored
from workers.kv_events.exact_index import ExactPrefixIndex


def request_with(request_id: str, chain: list[int], tokens: int) -> RoutingRequest:
    request = RoutingRequest(request_id=request_id, model="m")
    request.num_prompt_tokens = tokens
    request.block_hashes = {16: chain}
    return request


def routed(request: RoutingRequest, worker_id: str) -> Decision:
    return Decision(request_id=request.request_id, worker_id=worker_id, model="m",
                    profile="default", rule=None, reason="")


def test_routing_history_makes_the_same_worker_score_the_prefix_share() -> None:
    scorer = PrefixScorer("prefix", PrefixScorerParams())
    views = [make_view("w1"), make_view("w2")]
    first = request_with("a", [1, 2, 3, 4], 70)
    scorer.score(first, views, CycleState())
    scorer.on_routed(first, routed(first, "w1"))
    cycle = CycleState()
    scores = scorer.score(request_with("b", [1, 2, 3, 9], 80), views, cycle)
    assert scores == {"w1": 48 / 80, "w2": 0.0}
    assert cached_tokens(cycle, "w1") == 48
    assert worker_attributes(cycle, "w1") == {"prefix_match_tokens": 48}


def test_hit_leaves_at_least_one_token_to_compute() -> None:
    scorer = PrefixScorer("prefix", PrefixScorerParams())
    views = [make_view("w1")]
    request = request_with("a", [1, 2], 32)                 # exactly two full blocks
    scorer.score(request, views, CycleState())
    scorer.on_routed(request, routed(request, "w1"))
    assert scorer.score(request_with("b", [1, 2], 32), views, CycleState()) == {"w1": 0.5}


def test_exact_index_wins_while_whole_and_approximate_covers_gaps() -> None:
    scorer = PrefixScorer("prefix", PrefixScorerParams())
    exact = ExactPrefixIndex()
    scorer.attach_exact_index(exact)
    views = [make_view("w1"), make_view("w2")]
    warm = request_with("a", [1, 2, 3], 64)
    scorer.score(warm, views, CycleState())
    scorer.on_routed(warm, routed(warm, "w1"))              # approximate: w1 holds 1, 2, 3
    exact.apply_events("w2", [BlockStored(block_hashes=(1, 2), parent_block_hash=None,
                                          token_ids=(), block_size=16)])
    exact.apply_events("w1", [])                             # w1's stream: whole and empty
    cycle = CycleState()
    assert scorer.score(request_with("b", [1, 2, 3], 64), views, cycle) == {
        "w1": 0.0, "w2": 0.5}
    exact.state("w1").lost = True                            # w1 lost a batch: fall back
    assert scorer.score(request_with("c", [1, 2, 3], 64), views, CycleState()) == {
        "w1": 0.75, "w2": 0.5}


def test_index_is_sized_from_each_workers_kv_capacity() -> None:
    scorer = PrefixScorer("prefix", PrefixScorerParams())
    scorer.score(request_with("a", [1], 20), [make_view("w1", num_gpu_blocks=5)], CycleState())
    assert scorer.index.capacity("w1") == 4


def test_reload_keeps_the_learnt_index() -> None:
    old = PrefixScorer("prefix", PrefixScorerParams())
    request = request_with("a", [1, 2], 40)
    old.score(request, [make_view("w1")], CycleState())
    old.on_routed(request, routed(request, "w1"))
    new = PrefixScorer("prefix", PrefixScorerParams())
    new.inherit_state(old)
    assert new.score(request_with("b", [1, 2], 40), [make_view("w1")], CycleState()) == {
        "w1": 32 / 40}
