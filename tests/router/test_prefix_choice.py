"""The known cached prefix kept by decisions: chosen against best, first attempts only."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from policies.base import Decision, RoutingRequest
from router.keys import METRICS
from router.metrics import RouterMetrics
from router.prefix_choice import PrefixChoice
from tests.router.gateway_support import MODEL, RouterFactory, RouterHandle, subset
from workers.fleet import FleetConfig


def _decision(worker: str | None, **attributes: Any) -> Decision:
    return Decision(request_id="r", worker_id=worker, model="m", profile="p", rule=None,
                    reason="", attributes=attributes)


def _counts(metrics: RouterMetrics, reason: str) -> tuple[float, float]:
    def value(name: str) -> float:
        return metrics.registry.get_sample_value(name, {"reason": reason}) or 0.0
    return (value("kvroute_prefix_known_chosen_tokens_total"),
            value("kvroute_prefix_known_best_tokens_total"))


def test_counts_the_chosen_and_the_best_known_prefix_of_first_attempts() -> None:
    metrics = RouterMetrics()
    sink = PrefixChoice(metrics)
    request = RoutingRequest(request_id="r", model="m")
    sink.on_decision(request, _decision("a", prefix_match_tokens=512, prefix_best_tokens=512,
                                        decided_by="prefix"), 0, 0.0)
    sink.on_decision(request, _decision("b", prefix_match_tokens=0, prefix_best_tokens=1024,
                                        decided_by="load"), 0, 0.0)         # passed over
    sink.on_decision(request, _decision("e", prefix_match_tokens=256, prefix_best_tokens=256,
                                        decided_by="load"), 0, 0.0)
    sink.on_decision(request, _decision("c", prefix_match_tokens=0, prefix_best_tokens=1024,
                                        decided_by="load"), 1, 0.0)         # a retry
    sink.on_decision(request, _decision(None, prefix_best_tokens=64), 0, 0.0)  # no worker
    sink.on_decision(request, _decision("d", decided_by="load"), 0, 0.0)  # no prefix scorer
    assert _counts(metrics, "prefix") == (512.0, 512.0)
    assert _counts(metrics, "load") == (256.0, 1280.0)


def test_the_counters_are_exported() -> None:
    metrics = RouterMetrics()
    PrefixChoice(metrics).on_decision(
        RoutingRequest(request_id="r", model="m"),
        _decision("a", prefix_match_tokens=16, prefix_best_tokens=48,
                  decided_by="Only Within SLO"), 0, 0.0)
    text = metrics.render().decode()     # the label as on kvroute_decisions_total
    assert 'kvroute_prefix_known_chosen_tokens_total{reason="only-within-slo"} 16.0' in text
    assert 'kvroute_prefix_known_best_tokens_total{reason="only-within-slo"} 48.0' in text


def _summed(router: RouterHandle, sample: str) -> float:
    """A counter summed over its labels (the deciding terms)."""
    registry = router.app[METRICS].registry
    return sum(s.value for family in registry.collect() for s in family.samples
               if s.name == sample)


ROUTING = """\
profiles:
  default:
    filters: [{{type: model}}, {{type: healthy}}]
    scorers: [{{type: prefix, weight: 1.0}}]
    picker: {{type: {picker}}}
default_profile: default
"""


@pytest.mark.integration
@pytest.mark.parametrize("picker", ["round-robin", "max-score"])
async def test_a_live_router_counts_what_its_decisions_kept_of_the_known_prefix(
        emulated_fleet: FleetConfig, make_router: RouterFactory, picker: str) -> None:
    """Two workers, the same long prompt twice: round-robin sends the second to the other
    worker and passes the known prefix over; max-score follows it and keeps all of it."""
    router = await make_router(subset(emulated_fleet, ["h100-fast", "a100-fast"]),
                               ROUTING.format(picker=picker))
    prompt = " ".join(f"word{i}" for i in range(400))
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 2}
    workers = []
    async with aiohttp.ClientSession() as session:
        for _ in range(2):
            async with session.post(router.url + "/v1/completions", json=body) as resp:
                assert resp.status == 200
                workers.append(resp.headers["x-kvroute-worker"])
    best = _summed(router, "kvroute_prefix_known_best_tokens_total")
    chosen = _summed(router, "kvroute_prefix_known_chosen_tokens_total")
    assert best > 0                       # the second request's prefix, known from the first
    if picker == "round-robin":
        assert workers[0] != workers[1] and chosen == 0
    else:
        assert workers[0] == workers[1] and chosen == best
