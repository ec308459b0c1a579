"""``kvroute_output_length_*``: the engine in force's previous-turn judgement, read at each
scrape."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from policies.base import RequestOutcome, RoutingRequest
from policies.engine import PolicyEngine
from policies.loader import load_routing, parse_routing_text
from policies.producers.output_length import OutputLengthProducer
from router.metrics import RouterMetrics
from workers.fleet import load_fleet

REPO = Path(__file__).resolve().parents[2]
FLEET = load_fleet(REPO / "config" / "fleets" / "bench-mixed.yaml")
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def _engine() -> PolicyEngine:
    return PolicyEngine.build(load_routing(REPO / "config" / "routing.yaml"), FLEET, seed=0)


def _turn(producer: OutputLengthProducer, n: int, blocks: list[int], tokens: int) -> None:
    """One request with these block hashes, routed and finished with ``tokens`` generated."""
    request = RoutingRequest(request_id=f"r{n}", model=MODEL)
    request.block_hashes[16] = blocks
    producer.produce(request, [])
    producer.on_completed(request, RequestOutcome(request_id=request.request_id,
                                                  worker_id="w", status=200,
                                                  completion_tokens=tokens))


def test_series_follow_the_judgement_of_the_engine_in_force() -> None:
    engine = _engine()
    holder = [engine]
    metrics = RouterMetrics()
    metrics.watch_output_lengths(lambda: holder[0])
    get = metrics.registry.get_sample_value
    model = {"model": MODEL}
    assert get("kvroute_output_length_judged_requests_total", model) is None
    [producer] = [p for p in engine.producers if isinstance(p, OutputLengthProducer)]
    # conversations whose second turn generates what the first did: 10 or 1,000 tokens
    for c in range(6):
        opening = [c * 100 + k for k in range(8)]
        answer = 10 if c % 2 else 1000
        _turn(producer, 2 * c, opening, answer)
        _turn(producer, 2 * c + 1, [*opening, c * 100 + 50], answer)
    assert get("kvroute_output_length_judged_requests_total", model) == 6.0
    assert get("kvroute_output_length_error", {**model, "prediction": "previous_turn"}) == 0.0
    # the other way predicted 256 (no max_tokens, too few finished for a typical output)
    typical = get("kvroute_output_length_error", {**model, "prediction": "typical"})
    assert typical == pytest.approx((3 * math.log(1000 / 256) + 3 * math.log(256 / 10)) / 6)
    # a reload that starts afresh: the series are the new engine's
    holder[0] = _engine()
    assert get("kvroute_output_length_judged_requests_total", model) is None


def test_a_policy_without_the_producer_has_no_series() -> None:
    routing = parse_routing_text(
        "profiles:\n  plain:\n    scorers: [{type: kv-usage, weight: 1.0}]\n"
        "default_profile: plain\n")
    metrics = RouterMetrics()
    metrics.watch_output_lengths(lambda: PolicyEngine.build(routing, FLEET, seed=0))
    names = {m.name for m in metrics.registry.collect()}
    assert {"kvroute_output_length_error", "kvroute_output_length_judged_requests"} <= names
    assert not [s for m in metrics.registry.collect() for s in m.samples
                if s.name.startswith("kvroute_output_length_")]
