"""The estimated-time scorer: fastest worker scores 1, estimates land in the decision."""

from __future__ import annotations

import pytest

from policies.base import CycleState, Decision, RequestOutcome, RoutingRequest
from policies.cycle_keys import worker_attributes
from policies.errors import ParamError
from policies.scorers.estimated_time import EstimatedTimeParams, EstimatedTimeScorer
from tests.policies.conftest import make_view
from workers.engine.profiles import L40S_48GB


def request_of(request_id: str, tokens: int) -> RoutingRequest:
    request = RoutingRequest(request_id=request_id, model="m", max_tokens=50)
    request.num_prompt_tokens = tokens
    return request


def test_long_prompt_prefers_the_fast_gpu_and_records_estimates() -> None:
    scorer = EstimatedTimeScorer("estimated-time", EstimatedTimeParams(tpot_share=0.0))
    views = [make_view("h100"), make_view("l40s", gpu=L40S_48GB)]
    cycle = CycleState()
    scores = scorer.score(request_of("r", 12_000), views, cycle)
    assert scores["h100"] == 1.0 and scores["l40s"] < 0.4
    attributes = worker_attributes(cycle, "l40s")
    assert scores["l40s"] == pytest.approx(
        worker_attributes(cycle, "h100")["estimated_ttft_s"] / attributes["estimated_ttft_s"])
    assert set(attributes) == {"estimated_ttft_s", "estimated_tpot_s"}


def test_a_busy_fast_gpu_loses_to_an_idle_slow_one() -> None:
    scorer = EstimatedTimeScorer("estimated-time", EstimatedTimeParams())
    views = [make_view("h100", inflight_prefill_tokens=200_000),
             make_view("l40s", gpu=L40S_48GB)]
    scores = scorer.score(request_of("r", 2_000), views, CycleState())
    assert scores["l40s"] > scores["h100"]


def test_observed_latency_corrects_later_estimates() -> None:
    scorer = EstimatedTimeScorer("estimated-time", EstimatedTimeParams())
    view = make_view("h100")
    first = scorer.estimates(request_of("a", 1_000), [view], CycleState())["h100"]
    for i in range(30):
        request = request_of(f"r{i}", 1_000)
        scorer.score(request, [view], CycleState())
        scorer.on_routed(request, Decision(request.request_id, "h100", "m", "default", None, ""))
        scorer.on_completed(request, RequestOutcome(request.request_id, "h100", 200,
                                                    ttft_s=2 * first.raw_ttft_s,
                                                    tpot_s=first.raw_tpot_s))
    later = scorer.estimates(request_of("z", 1_000), [view], CycleState())["h100"]
    assert later.ttft_s == pytest.approx(2 * later.raw_ttft_s, rel=1e-6)
    # routed prefill raised the raw TPOT prediction while the observed one stayed put
    assert later.raw_tpot_s > first.raw_tpot_s and later.tpot_s < later.raw_tpot_s


def test_tpot_share_must_be_a_fraction() -> None:
    with pytest.raises(ParamError):
        EstimatedTimeParams(tpot_share=1.5)
