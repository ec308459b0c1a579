"""The cost scorer: dollars per request from price and estimated GPU-seconds."""

from __future__ import annotations

import pytest

from policies.base import CycleState, RoutingRequest
from policies.cycle_keys import worker_attributes
from policies.latency.estimator import ESTIMATES_KEY
from policies.scorers.cost import CostParams, CostScorer
from tests.policies.conftest import make_view
from workers.engine.profiles import A100_80GB, H100_80GB, L40S_48GB


def request_of(tokens: int, output: int) -> RoutingRequest:
    request = RoutingRequest(request_id="r", model="m", max_tokens=output)
    request.num_prompt_tokens = tokens
    return request


def test_cheapest_scores_one_and_cost_is_recorded() -> None:
    scorer = CostScorer("cost", CostParams())
    views = [make_view("h100", gpu=H100_80GB), make_view("a100", gpu=A100_80GB),
             make_view("l40s", gpu=L40S_48GB)]
    cycle = CycleState()
    scores = scorer.score(request_of(4_000, 20), views, cycle)
    costs = {v.id: worker_attributes(cycle, v.id)["estimated_cost_usd"] for v in views}
    cheapest = min(costs, key=costs.__getitem__)
    assert scores[cheapest] == 1.0
    for worker_id, cost in costs.items():
        assert scores[worker_id] == pytest.approx(costs[cheapest] / cost)
    estimates = cycle.read(ESTIMATES_KEY)
    assert costs["a100"] == pytest.approx(1.80 / 3600 * estimates["a100"].gpu_s)


def test_prefill_heavy_work_is_cheaper_on_the_h100_than_on_the_a100() -> None:
    scorer = CostScorer("cost", CostParams())
    views = [make_view("h100", gpu=H100_80GB), make_view("a100", gpu=A100_80GB)]
    scores = scorer.score(request_of(16_000, 1), views, CycleState())
    assert scores["h100"] == 1.0 and scores["a100"] < 0.7
