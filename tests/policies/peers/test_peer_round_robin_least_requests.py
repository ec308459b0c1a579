from __future__ import annotations

from policies.base import CycleState
from policies.peers.least_requests import LeastRequestsScorer
from policies.peers.round_robin import RoundRobinScorer
from tests.policies.peers.peer_fixtures import make_request, make_view


def test_round_robin_cycles_in_url_order_and_restarts_on_a_new_set() -> None:
    scorer = RoundRobinScorer()
    views = [make_view("b", url="http://h:2"), make_view("a", url="http://h:3"),
             make_view("c", url="http://h:1")]
    assert [scorer.choose(views) for _ in range(4)] == ["c", "b", "a", "c"]
    assert [scorer.choose(views[:2]) for _ in range(3)] == ["b", "a", "b"]
    assert scorer.score(make_request(), views, CycleState()) == {"b": 1.0, "a": 0.0, "c": 0.0}


def test_least_requests_scores_fewest_inflight_highest() -> None:
    views = [make_view("a", inflight=4), make_view("b", inflight=0), make_view("c", inflight=2)]
    assert LeastRequestsScorer().score(make_request(), views, CycleState()) == {
        "a": 0.0, "b": 1.0, "c": 0.5}
