"""policies/scorers/kv_usage.py."""

from __future__ import annotations

from collections.abc import Callable

from policies.base import CycleState, RoutingRequest
from policies.scorers.kv_usage import KvUsageScorer
from workers.models import WorkerView

ViewFactory = Callable[..., WorkerView]


def test_free_cache_fraction(view: ViewFactory) -> None:
    views = [view("a", kv_usage=0.0), view("b", kv_usage=0.25), view("c", kv_usage=1.0),
             view("d", kv_usage=1.5)]
    scores = KvUsageScorer("kv").score(RoutingRequest("r", "m"), views, CycleState())
    assert dict(scores) == {"a": 1.0, "b": 0.75, "c": 0.0, "d": 0.0}
