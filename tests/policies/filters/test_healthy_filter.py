"""policies/filters/healthy.py."""

from __future__ import annotations

from collections.abc import Callable

from policies.base import CycleState, RoutingRequest
from policies.filters.healthy import HealthyFilter, HealthyFilterParams
from workers.models import WorkerView

ViewFactory = Callable[..., WorkerView]


def test_drops_unhealthy_and_stale_workers(view: ViewFactory) -> None:
    views = [view("up", staleness_s=1.0), view("down", healthy=False),
             view("stale", staleness_s=30.0), view("never", staleness_s=float("inf"))]
    request = RoutingRequest("r", "m")
    any_age = HealthyFilter("healthy", HealthyFilterParams()).filter(request, views, CycleState())
    assert [v.id for v in any_age] == ["up", "stale", "never"]
    fresh = HealthyFilter("healthy", HealthyFilterParams(max_staleness_s=10.0)).filter(
        request, views, CycleState())
    assert [v.id for v in fresh] == ["up"]
