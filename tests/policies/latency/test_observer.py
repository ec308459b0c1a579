"""policies/latency/observer.py: the estimating plugins of a profile share one estimator,
and only the first of them learns, so each request is learnt from once."""

from __future__ import annotations

import textwrap

import pytest

from policies.base import RequestOutcome, RoutingRequest
from policies.engine import PolicyEngine
from policies.errors import RoutingConfigError
from policies.latency.estimator import PrefillArrivals
from policies.latency.observer import EstimatingPlugin
from policies.loader import parse_routing_text
from policies.registry import default_registry
from tests.policies.conftest import MODEL, make_view
from workers.fleet import FleetConfig

ROUTING = """
slo: {ttft_s: 0.5, tpot_s: 0.05}
profiles:
  default:
    scorers:
      - {type: estimated-time%s}
      - {type: cost%s}
    picker: {type: slo-cost}
  other:
    scorers: [{type: cost}]
    picker: {type: max-score}
"""


def engine_for(time_params: str = "", cost_params: str = "",
               previous: PolicyEngine | None = None) -> PolicyEngine:
    registry = default_registry()
    routing = parse_routing_text(textwrap.dedent(ROUTING % (time_params, cost_params)),
                                 registry)
    return PolicyEngine.build(routing, FleetConfig({}, {}, ()), registry, seed=0,
                              previous=previous)


def estimating(engine: PolicyEngine, profile: str) -> list[EstimatingPlugin]:
    return [weighted.scorer for weighted in engine.profiles[profile].scorers
            if isinstance(weighted.scorer, EstimatingPlugin)]


def route_and_finish(engine: PolicyEngine, request_id: str, now: float) -> str:
    request = RoutingRequest(request_id=request_id, model=MODEL, num_prompt_tokens=3000,
                             max_tokens=64, arrival_time=now)
    views = [make_view("w1"), make_view("w2", running=8)]
    decision = engine.decide(request, views)
    assert decision.worker_id is not None
    engine.on_routed(request, decision)
    engine.on_completed(request, RequestOutcome(
        request_id=request_id, worker_id=decision.worker_id, status=200,
        prompt_tokens=3000, completion_tokens=64, ttft_s=0.4, tpot_s=0.02))
    return decision.worker_id


def test_the_estimating_plugins_of_a_profile_share_one_estimator_and_one_learns() -> None:
    engine = engine_for()
    first, second = estimating(engine, "default")
    assert first.estimator is second.estimator
    assert first.learns and not second.learns
    (alone,) = estimating(engine, "other")           # another profile: its own
    assert alone.estimator is not first.estimator and alone.learns


def test_each_routed_and_finished_request_is_learnt_once() -> None:
    engine = engine_for()
    estimator = estimating(engine, "default")[0].estimator
    worker_id = route_and_finish(engine, "r1", now=10.0)
    once = PrefillArrivals(estimator.arrivals.taus_s)
    once.add(worker_id, 3000, 10.0)      # nothing cached: the whole prompt arrived once
    assert estimator.arrivals.rate(worker_id, 10.0) == pytest.approx(once.rate(worker_id, 10.0))
    assert estimator.correction.samples(worker_id, "ttft") == 1
    assert estimator.correction.samples(worker_id, "tpot") == 1


def test_plugins_that_ask_for_different_default_output_tokens_are_refused() -> None:
    with pytest.raises(RoutingConfigError, match=r"scorers\[1\].*default_output_tokens"):
        engine_for(cost_params=", params: {default_output_tokens: 128}")
    engine_for(time_params=", params: {default_output_tokens: 128}",
               cost_params=", params: {default_output_tokens: 128}")


def test_a_reload_hands_the_learnt_estimator_to_every_plugin_of_the_profile() -> None:
    old = engine_for()
    learnt = estimating(old, "default")[0].estimator
    route_and_finish(old, "r1", now=1.0)
    new = engine_for(previous=old)
    assert all(plugin.estimator is learnt for plugin in estimating(new, "default"))
    # the new owner keeps learning into it, the follower does not
    worker_id = route_and_finish(new, "r2", now=2.0)
    assert learnt.correction.samples(worker_id, "ttft") >= 1
    assert sum(learnt.correction.samples(w, "ttft") for w in ("w1", "w2")) == 2


def test_a_reload_keeps_what_was_learnt_when_only_the_second_plugin_had_a_predecessor() -> None:
    registry = default_registry()
    before = parse_routing_text(textwrap.dedent("""
        slo: {ttft_s: 0.5, tpot_s: 0.05}
        profiles:
          default:
            scorers: [{type: prefix}, {type: cost}]
            picker: {type: slo-cost}
        """), registry)
    old = PolicyEngine.build(before, FleetConfig({}, {}, ()), registry, seed=0)
    (learnt_by,) = estimating(old, "default")
    new = engine_for(previous=old)      # estimated-time takes scorers[0], cost stays at [1]
    owner, follower = estimating(new, "default")
    assert owner.learns and not follower.learns
    assert owner.estimator is follower.estimator is learnt_by.estimator
