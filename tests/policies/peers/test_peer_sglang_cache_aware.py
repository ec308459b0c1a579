from __future__ import annotations

from pathlib import Path

from policies.base import CycleState, RoutingRequest
from policies.peers.sglang_cache_aware import SglangCacheAwareParams, SglangCacheAwareScorer
from tests.policies.peers.peer_fixtures import make_request, make_view, routed

REPO = Path(__file__).resolve().parents[3]


def _scorer(**params: float) -> SglangCacheAwareScorer:
    return SglangCacheAwareScorer(SglangCacheAwareParams(**params))  # type: ignore[arg-type]


def test_balance_guard_needs_both_thresholds_strictly() -> None:
    scorer = _scorer()
    request = make_request(tokens=range(100))
    scorer.on_routed(request, routed(request, "w0"))    # w0 holds the whole prompt
    # gap 64 is not > 64: not imbalanced, the cache wins
    views = [make_view("w0", inflight=128), make_view("w1", inflight=64)]
    assert scorer.choose(make_request(tokens=range(100)), views)[:2] == ("w0", "cache")
    # gap 65 > 64 and 129 > 1.5 * 64 = 96: imbalanced, shortest queue
    views = [make_view("w0", inflight=129), make_view("w1", inflight=64)]
    assert scorer.choose(make_request(tokens=range(100)), views)[:2] == ("w1", "balance")
    # gap 65 > 64 but 195 > 1.5 * 130 = 195 is false: the relative threshold holds it back
    views = [make_view("w0", inflight=195), make_view("w1", inflight=130)]
    assert scorer.choose(make_request(tokens=range(100)), views)[:2] == ("w0", "cache")
    # 196 > 195: both thresholds trip
    views = [make_view("w0", inflight=196), make_view("w1", inflight=130)]
    assert scorer.choose(make_request(tokens=range(100)), views)[:2] == ("w1", "balance")


def test_cache_threshold_is_strict_and_misses_go_to_first_min_load() -> None:
    scorer = _scorer()
    first = make_request("a", tokens=range(30))
    scorer.on_routed(first, routed(first, "w1"))
    views = [make_view("w0", inflight=3), make_view("w1", inflight=5), make_view("w2", inflight=3)]
    # 30 of 100 tokens = 0.3 is not > 0.3: min load, first minimum (w0, not w2)
    assert scorer.choose(make_request(tokens=range(100)), views) == ("w0", "min-load", 30)
    # 30 of 99 = 0.303 > 0.3: affinity to w1 despite its higher load
    assert scorer.choose(make_request(tokens=range(99)), views) == ("w1", "cache", 30)


def test_score_is_one_hot_and_routing_inserts_into_the_chosen_tree() -> None:
    scorer = _scorer()
    views = [make_view("w0"), make_view("w1")]
    request = make_request(tokens=[7, 8, 9, 10])
    scores = scorer.score(request, views, CycleState())
    assert scores == {"w0": 1.0, "w1": 0.0}
    scorer.on_routed(request, routed(request, "w1"))
    assert scorer.tree("w1").match_length([7, 8, 9, 10, 11], 1.0) == 4
    assert scorer.tree("w0").match_length([7, 8, 9, 10, 11], 1.0) == 0


def test_characters_are_the_units_without_token_ids() -> None:
    scorer = _scorer()
    request = make_request(text="hello world, how are you")
    scorer.on_routed(request, routed(request, "w1"))
    views = [make_view("w0"), make_view("w1")]
    choice, reason, matched = scorer.choose(make_request(text="hello world, who are you"), views)
    assert (choice, reason, matched) == ("w1", "cache", len("hello world, "))


def test_eviction_runs_at_the_interval_on_request_time() -> None:
    scorer = _scorer(max_tree_size=10, eviction_interval_secs=60)
    old = make_request("old", tokens=range(0, 8), at=0.0)
    scorer.on_routed(old, routed(old, "w0"))
    new = make_request("new", tokens=range(100, 108), at=30.0)
    scorer.on_routed(new, routed(new, "w0"))
    assert scorer.tree("w0").size == 16            # no eviction before 60 s
    tick = make_request("tick", tokens=[100], at=60.0)
    scorer.on_routed(tick, routed(tick, "w0"))
    tree = scorer.tree("w0")
    assert tree.size == 8                          # the least recently used leaf went first
    assert tree.match_length(range(100, 108), 61.0) == 8
    assert tree.match_length(range(0, 8), 61.0) == 0


def test_text_is_matched_by_its_characters_and_the_tokens_type_by_its_tokens() -> None:
    """Keyed on the tokens producer's ids (the chat template's header included), 16 short
    chats of different texts all matched the first one's header and went to its worker;
    SGLang's router in front of HTTP workers matches their text, which shares nothing."""
    from policies.engine import PolicyEngine
    from policies.loader import parse_routing_text
    from tests.policies.peers.peer_fixtures import MODEL
    from workers.fleet import load_fleet

    def routed_to(scorer_type: str) -> list[str | None]:
        routing = parse_routing_text(
            f"profiles: {{default: {{scorers: [{{type: {scorer_type}}}], "
            "picker: {type: max-score}}}\ndefault_profile: default\n")
        fleet = load_fleet(REPO / "config" / "fleet.yaml")
        engine = PolicyEngine.build(routing, fleet, seed=1)
        views = [make_view("w0"), make_view("w1"), make_view("w2")]
        chosen = []
        for i, letter in enumerate("bcdefghijklmnopq"):
            request = RoutingRequest(f"r{i}", MODEL, messages=[
                {"role": "user", "content": f"{letter}{i * 7919:09d}"}], arrival_time=float(i))
            for producer in engine.producers:
                producer.produce(request, views)
            decision = engine.decide(request, views)
            engine.on_routed(request, decision)
            chosen.append(decision.worker_id)
            views = [make_view(v.id, inflight=v.inflight_requests + (
                v.id == decision.worker_id)) for v in views]
        return chosen

    by_text = routed_to("sglang-cache-aware")
    assert len(set(by_text)) == 3                    # least loaded each time: spread
    by_tokens = routed_to("sglang-cache-aware-tokens")
    assert by_tokens.count(by_tokens[0]) >= 12        # the template's header: one worker
