"""The prefix scorer: approximate index learnt from routing, exact KV-event index first."""

from __future__ import annotations

from policies.base import CycleState, Decision, RequestOutcome, RoutingRequest
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
    assert worker_attributes(cycle, "w1") == {"prefix_match_tokens": 48,
                                              "prefix_best_tokens": 48}
    # whichever worker is chosen, the decision also says what the best-placed one held
    assert worker_attributes(cycle, "w2") == {"prefix_match_tokens": 0,
                                              "prefix_best_tokens": 48}
    cycle = CycleState()
    scorer.score(request_with("c", [7, 8], 40), views, cycle)
    assert worker_attributes(cycle, "w2") == {"prefix_match_tokens": 0,
                                              "prefix_best_tokens": 0}


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
    scorer.on_completed(warm, RequestOutcome("a", "w1", 200))  # and may evict them now
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


def test_a_forgotten_worker_frees_its_place_in_the_index() -> None:
    """A worker that left the fleet (``forget_worker``) kept a slot, a pool size and a block
    size for good: a fleet whose workers take new ids widened every shared block's holder
    mask by one bit per id ever seen."""
    scorer = PrefixScorer("prefix", PrefixScorerParams())
    for n in range(50):               # fifty workers in turn, each routed to, then gone
        view = make_view(f"pod-{n}")
        request = request_with(f"r{n}", [1, 2, 3], 64)
        scorer.score(request, [view], CycleState())
        scorer.on_routed(request, routed(request, f"pod-{n}"))
        scorer.forget_worker(f"pod-{n}")
    assert scorer.index.slots_in_use() == 0 and scorer.index.distinct_blocks() == 0
    assert not scorer._block_size and not scorer._gpu_blocks
    # an engine started again (forgotten while still in the fleet) is tracked anew
    views = [make_view("w1", num_gpu_blocks=5)]
    scorer.score(request_with("a", [1], 20), views, CycleState())
    scorer.forget_worker("w1")
    scorer.score(request_with("b", [1], 20), views, CycleState())
    assert scorer.index.capacity("w1") == 4


def test_a_worker_whose_block_size_changed_loses_its_history() -> None:
    """A worker back with another block size and the same number of blocks kept the former
    size: its chains were inserted at 16 tokens a block and matched at 32, never again."""
    scorer = PrefixScorer("prefix", PrefixScorerParams())
    request = RoutingRequest(request_id="a", model="m")
    request.num_prompt_tokens = 96
    request.block_hashes = {16: [1, 2, 3, 4, 5, 6], 32: [7, 8, 9]}
    small = [make_view("w1", block_size=16)]
    scorer.score(request, small, CycleState())
    scorer.on_routed(request, routed(request, "w1"))
    assert scorer.score(request, small, CycleState()) == {"w1": 80 / 96}
    large = [make_view("w1", block_size=32)]
    assert scorer.score(request, large, CycleState()) == {"w1": 0.0}
    scorer.on_routed(request, routed(request, "w1"))          # now learnt at 32 a block
    assert scorer.score(request, large, CycleState()) == {"w1": 64 / 96}


def test_reload_keeps_the_learnt_index() -> None:
    old = PrefixScorer("prefix", PrefixScorerParams())
    request = request_with("a", [1, 2], 40)
    old.score(request, [make_view("w1")], CycleState())
    old.on_routed(request, routed(request, "w1"))
    new = PrefixScorer("prefix", PrefixScorerParams())
    new.inherit_state(old)
    assert new.score(request_with("b", [1, 2], 40), [make_view("w1")], CycleState()) == {
        "w1": 32 / 40}


def test_unfinished_requests_blocks_count_until_their_events_arrive() -> None:
    """A worker followed by KV events reports a prompt's blocks only once its prefill has
    been scheduled; meanwhile (and while the request runs, pinning them) the blocks of the
    requests routed there count as cached."""
    scorer = PrefixScorer("prefix", PrefixScorerParams())
    exact = ExactPrefixIndex()
    scorer.attach_exact_index(exact)
    views = [make_view("w1"), make_view("w2")]
    for worker in ("w1", "w2"):
        exact.apply_events(worker, [])                       # both whole and empty
    first = request_with("a", [1, 2, 3, 4], 70)
    scorer.score(first, views, CycleState())
    scorer.on_routed(first, routed(first, "w1"))
    assert scorer.score(request_with("b", [1, 2, 3, 9], 80), views, CycleState()) == {
        "w1": 48 / 80, "w2": 0.0}
    # the events arrive: blocks 1 and 2 stored (block 3's chunk not yet computed)
    exact.apply_events("w1", [BlockStored(block_hashes=(1, 2), parent_block_hash=None,
                                          token_ids=(), block_size=16)])
    assert scorer.score(request_with("c", [1, 2, 3, 9], 80), views, CycleState()) == {
        "w1": 48 / 80, "w2": 0.0}
    scorer.on_completed(first, RequestOutcome("a", "w1", 200))
    assert scorer.score(request_with("d", [1, 2, 3, 9], 80), views, CycleState()) == {
        "w1": 32 / 80, "w2": 0.0}


def test_unfinished_requests_do_not_count_without_kv_events_or_when_turned_off() -> None:
    views = [make_view("w1")]
    for params, exact in ((PrefixScorerParams(), None),
                          (PrefixScorerParams(inflight_blocks=False), ExactPrefixIndex())):
        scorer = PrefixScorer("prefix", params)
        scorer.attach_exact_index(exact)
        if exact is not None:
            exact.apply_events("w1", [])
        first = request_with("a", [1, 2, 3], 64)
        scorer.score(first, views, CycleState())
        scorer.on_routed(first, routed(first, "w1"))
        assert scorer.inflight is None or len(scorer.inflight) == 0
        expected = 0.0 if exact is not None else 32 / 40   # exact and empty / history
        assert scorer.score(request_with("b", [1, 2, 3], 40), views, CycleState()) == {
            "w1": expected}


def test_reload_keeps_the_unfinished_requests_blocks() -> None:
    exact = ExactPrefixIndex()
    exact.apply_events("w1", [])
    old = PrefixScorer("prefix", PrefixScorerParams())
    old.attach_exact_index(exact)
    first = request_with("a", [1, 2, 3], 64)
    old.score(first, [make_view("w1")], CycleState())
    old.on_routed(first, routed(first, "w1"))
    new = PrefixScorer("prefix", PrefixScorerParams())
    new.inherit_state(old)
    assert new.score(request_with("b", [1, 2, 3], 64), [make_view("w1")], CycleState()) == {
        "w1": 0.75}
    new.on_completed(first, RequestOutcome("a", "w1", 200))   # finished under the new one
    assert new.score(request_with("c", [1, 2, 3], 64), [make_view("w1")], CycleState()) == {
        "w1": 0.0}


def test_routes_learnt_before_any_decision_wait_for_the_workers_block_size() -> None:
    """A replica starting learns the others' routes before its first decision, when no
    worker's block size has been read: they were taken at 16, so a worker of 64-token blocks
    learnt nothing from a route hashed at 64 alone, and hashes of the wrong size from one
    hashed at both, which stayed. They are learnt at the worker's size once one is read."""
    scorer = PrefixScorer("prefix", PrefixScorerParams())
    scorer.learn_routed("w64", {64: [7, 8]})
    scorer.learn_routed("w64", {16: [1, 2, 3, 4], 64: [9]})
    scorer.learn_routed("w16", {16: [1, 2], 64: [5]})
    views = [make_view("w64", block_size=64), make_view("w16")]
    request = RoutingRequest(request_id="r", model="m")
    request.num_prompt_tokens = 200
    request.block_hashes = {16: [1, 2, 3, 4], 64: [7, 8, 5]}
    assert scorer.score(request, views, CycleState()) == {"w64": 128 / 200, "w16": 32 / 200}
    scorer.learn_routed("w64", {64: [7, 8, 5]})         # a size known: learnt at once
    assert scorer.score(request, views, CycleState())["w64"] == 192 / 200
