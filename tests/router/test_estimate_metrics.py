"""``kvroute_estimate_*``: the engine in force's estimate errors, read at each scrape."""

from __future__ import annotations

import math
from pathlib import Path

from policies.engine import PolicyEngine
from policies.latency.online import Prediction
from policies.loader import load_routing, parse_routing_text
from router.estimate_metrics import learning_corrections
from router.metrics import RouterMetrics
from workers.fleet import load_fleet

REPO = Path(__file__).resolve().parents[2]
FLEET = load_fleet(REPO / "config" / "fleets" / "bench-mixed.yaml")


def _engine() -> PolicyEngine:
    return PolicyEngine.build(load_routing(REPO / "config" / "routing.yaml"), FLEET, seed=0)


def test_series_follow_the_judgement_of_the_engine_in_force() -> None:
    engine = _engine()
    holder = [engine]
    metrics = RouterMetrics()
    metrics.watch_estimates(lambda: holder[0])
    get = metrics.registry.get_sample_value
    ttft = {"profile": "default", "metric": "ttft"}
    tpot = {"profile": "default", "metric": "tpot"}
    # nothing finished yet: nothing compared, no error shown
    assert get("kvroute_estimate_compared_requests_total", tpot) == 0.0
    assert get("kvroute_estimate_error", {**ttft, "estimate": "raw"}) is None
    [(profile, correction)] = learning_corrections(engine)
    assert profile == "default"
    # TTFT twice late every time (the correction learns it); TPOT right on average, off by
    # e^0.3 either way in turn (the correction only adds its own error)
    for n in range(60):
        correction.remember(f"r{n}", Prediction("w", "H100-80GB", 0.1, 0.02))
        correction.observe(f"r{n}", 0.2, 0.02 * math.exp(0.3 if n % 2 else -0.3))
    assert get("kvroute_estimate_compared_requests_total", ttft) == 60.0
    assert get("kvroute_estimate_error", {**ttft, "estimate": "raw"}) == (
        correction.judgement("ttft")[0])
    assert get("kvroute_estimate_error", {**tpot, "estimate": "corrected"}) == (
        correction.judgement("tpot")[1])
    errors = {(labels["metric"], estimate): get("kvroute_estimate_error",
                                                {**labels, "estimate": estimate}) or 0.0
              for labels in (ttft, tpot) for estimate in ("raw", "corrected")}
    assert errors["ttft", "corrected"] < errors["ttft", "raw"]
    assert errors["tpot", "corrected"] > errors["tpot", "raw"] > 0
    # a reload that starts afresh: the series are the new engine's
    holder[0] = _engine()
    assert get("kvroute_estimate_compared_requests_total", ttft) == 0.0


def test_a_profile_without_time_estimates_has_no_series() -> None:
    routing = parse_routing_text(
        "profiles:\n"
        "  plain:\n"
        "    scorers: [{type: kv-usage, weight: 1.0}]\n"
        "    picker: {type: max-score}\n"
        "default_profile: plain\n")
    engine = PolicyEngine.build(routing, FLEET, seed=0)
    metrics = RouterMetrics()
    metrics.watch_estimates(lambda: engine)
    assert list(learning_corrections(engine)) == []
    assert "kvroute_estimate_compared_requests_total{" not in metrics.render().decode()
