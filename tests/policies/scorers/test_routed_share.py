"""The routed-share scorer: decaying per-worker shares of routed traffic."""

from __future__ import annotations

import pytest

from policies.base import CycleState, Decision, RoutingRequest
from policies.errors import ParamError
from policies.scorers.routed_share import DecayingLoads, RoutedShareParams, RoutedShareScorer
from tests.policies.conftest import make_view


def routed(scorer: RoutedShareScorer, worker_id: str | None, tokens: int) -> None:
    request = RoutingRequest(request_id="r", model="m")
    request.num_prompt_tokens = tokens
    scorer.on_routed(request, Decision(request_id="r", worker_id=worker_id, model="m",
                                       profile="default", rule=None, reason=""))


def scores(scorer: RoutedShareScorer) -> dict[str, float]:
    views = [make_view("w1"), make_view("w2"), make_view("w3")]
    return dict(scorer.score(RoutingRequest(request_id="x", model="m"), views, CycleState()))


def test_all_equal_before_any_routing() -> None:
    assert scores(RoutedShareScorer("s", RoutedShareParams())) == {"w1": 1.0, "w2": 1.0,
                                                                   "w3": 1.0}


def test_token_loads_relative_to_the_busiest() -> None:
    scorer = RoutedShareScorer("s", RoutedShareParams(half_life_requests=1e9))
    routed(scorer, "w1", 1000)
    routed(scorer, "w2", 250)
    routed(scorer, None, 5000)                 # no worker chosen: nothing recorded
    assert scores(scorer) == pytest.approx({"w1": 0.0, "w2": 0.75, "w3": 1.0})


def test_request_unit_counts_requests() -> None:
    scorer = RoutedShareScorer("s", RoutedShareParams(unit="requests", half_life_requests=1e9))
    for worker, tokens in (("w1", 10), ("w2", 9000), ("w2", 1)):
        routed(scorer, worker, tokens)
    assert scores(scorer) == pytest.approx({"w1": 0.5, "w2": 0.0, "w3": 1.0})


def test_half_life_in_routed_requests() -> None:
    loads = DecayingLoads(half_life=2)
    loads.add("a", 8.0)
    loads.add("b", 0.0)
    loads.add("b", 0.0)
    assert loads.load("a") == pytest.approx(4.0)     # two requests later: half
    assert loads.load("missing") == 0.0


def test_rescaling_keeps_the_loads() -> None:
    loads = DecayingLoads(half_life=0.01)            # the scale overflows quickly
    for _ in range(2000):
        loads.add("a", 1.0)
    loads.add("b", 1.0)
    assert loads.load("b") == pytest.approx(1.0)
    assert loads.load("a") == pytest.approx(2.0 ** -100, rel=1e-6)


def test_reload_inherits_loads_and_params_are_checked() -> None:
    old = RoutedShareScorer("s", RoutedShareParams())
    routed(old, "w1", 100)
    new = RoutedShareScorer("s", RoutedShareParams())
    new.inherit_state(old)
    assert scores(new)["w1"] == 0.0
    with pytest.raises(ParamError, match="half_life_requests"):
        RoutedShareParams(half_life_requests=0)


def routed_family(scorer: RoutedShareScorer, worker_id: str, first_block: int) -> None:
    request = RoutingRequest(request_id="r", model="m")
    request.num_prompt_tokens = 100
    request.block_hashes = {16: [first_block, 7]}
    scorer.on_routed(request, Decision(request_id="r", worker_id=worker_id, model="m",
                                       profile="default", rule=None, reason=""))


def test_families_count_distinct_first_blocks_in_the_window() -> None:
    scorer = RoutedShareScorer("s", RoutedShareParams(unit="families", half_life_requests=1e9,
                                                      family_window_requests=4))
    for _ in range(3):
        routed_family(scorer, "w1", 1)          # one family, three requests
    routed_family(scorer, "w2", 2)
    # loads: w1 = 1 family + 300/400 tokens, w2 = 1 + 100/400, w3 = 0
    assert scores(scorer) == pytest.approx({"w1": 0.0, "w2": 1 - 1.25 / 1.75, "w3": 1.0})
    routed_family(scorer, "w2", 3)
    routed_family(scorer, "w2", 2)
    assert scorer.families.active("w1") == 1    # its last request is one of the last 4
    routed_family(scorer, "w2", 2)              # now it is not
    # w1 = 0 families + 300/700 tokens, w2 = 2 families + 400/700
    assert scores(scorer) == pytest.approx({"w1": 1 - (3 / 7) / (2 + 4 / 7), "w2": 0.0,
                                            "w3": 1.0})
