"""policies/scorers/inflight.py."""

from __future__ import annotations

from collections.abc import Callable

from policies.base import CycleState, RoutingRequest
from policies.scorers.inflight import InflightParams, InflightScorer
from workers.models import WorkerView

ViewFactory = Callable[..., WorkerView]


def test_requests_and_tokens(view: ViewFactory) -> None:
    views = [view("a", inflight_requests=1, inflight_tokens=4000),
             view("b", inflight_requests=3, inflight_tokens=1000),
             view("c", inflight_requests=5, inflight_tokens=2000)]
    request = RoutingRequest("r", "m")

    def score(params: InflightParams) -> dict[str, float]:
        return dict(InflightScorer("i", params).score(request, views, CycleState()))

    assert score(InflightParams()) == {"a": 1.0, "b": 0.5, "c": 0.0}
    assert score(InflightParams(unit="tokens")) == {"a": 0.0, "b": 1.0, "c": 2 / 3}
    assert score(InflightParams(mode="absolute", threshold=4)) == {"a": 0.75, "b": 0.25, "c": 0.0}
