"""The prefix-affinity scorer: remembers where prompt families went, beyond cache capacity."""

from __future__ import annotations

import pytest

from policies.base import CycleState, Decision, RoutingRequest
from policies.errors import ParamError
from policies.scorers.prefix_affinity import PrefixAffinityParams, PrefixAffinityScorer
from tests.policies.conftest import make_view


def request_with(chain: list[int]) -> RoutingRequest:
    request = RoutingRequest(request_id="r", model="m")
    request.num_prompt_tokens = 16 * len(chain) + 5
    request.block_hashes = {16: chain}
    return request


def route(scorer: PrefixAffinityScorer, chain: list[int], worker_id: str) -> None:
    request = request_with(chain)
    scorer.on_routed(request, Decision(request_id="r", worker_id=worker_id, model="m",
                                       profile="default", rule=None, reason=""))


def test_share_of_leading_blocks_remembered_per_worker() -> None:
    scorer = PrefixAffinityScorer("a", PrefixAffinityParams())
    views = [make_view("w1"), make_view("w2")]
    scorer.score(request_with([1]), views, CycleState())       # learns the block size
    route(scorer, [1, 2, 3], "w1")
    route(scorer, [1, 5], "w2")
    assert scorer.score(request_with([1, 2, 3, 4]), views, CycleState()) == {
        "w1": 0.75, "w2": 0.25}
    assert scorer.score(request_with([9]), views, CycleState()) == {"w1": 0.0, "w2": 0.0}


def test_memory_is_a_multiple_of_the_kv_capacity() -> None:
    scorer = PrefixAffinityScorer("a", PrefixAffinityParams(memory_factor=2.0))
    assert scorer.memory_blocks(40) == 78          # 2 × (40 - null block)
    assert scorer.memory_blocks(0) == 16384        # unknown pool: the default
    view = make_view("w1")
    scorer.score(request_with([1]), [view], CycleState())
    assert scorer.index.capacity("w1") == scorer.memory_blocks(view.num_gpu_blocks)


def test_family_outlives_a_cache_sized_memory() -> None:
    views = [make_view("w1")]
    scorer = PrefixAffinityScorer("a", PrefixAffinityParams(memory_factor=1.0))
    scorer.score(request_with([1]), views, CycleState())
    capacity = scorer.memory_blocks(views[0].num_gpu_blocks)
    route(scorer, [1, 2], "w1")
    route(scorer, list(range(100, 100 + capacity)), "w1")     # a cache's worth of others
    assert scorer.score(request_with([1, 2]), views, CycleState()) == {"w1": 0.0}
    longer = PrefixAffinityScorer("a", PrefixAffinityParams(memory_factor=2.0))
    longer.score(request_with([1]), views, CycleState())
    route(longer, [1, 2], "w1")
    route(longer, list(range(100, 100 + capacity)), "w1")
    assert longer.score(request_with([1, 2]), views, CycleState()) == {"w1": 1.0}


def test_reload_keeps_memory_and_params_are_checked() -> None:
    old = PrefixAffinityScorer("a", PrefixAffinityParams())
    old.score(request_with([1]), [make_view("w1")], CycleState())
    route(old, [1], "w1")
    new = PrefixAffinityScorer("a", PrefixAffinityParams())
    new.inherit_state(old)
    assert new.score(request_with([1]), [make_view("w1")], CycleState()) == {"w1": 1.0}
    with pytest.raises(ParamError, match="memory_factor"):
        PrefixAffinityParams(memory_factor=0)
