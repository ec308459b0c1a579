"""policies/filters/labels.py: labels and pool filters."""

from __future__ import annotations

from collections.abc import Callable

from policies.base import CycleState, RoutingRequest
from policies.filters.labels import LabelsFilter
from workers.models import WorkerView

ViewFactory = Callable[..., WorkerView]


def test_every_label_must_match(view: ViewFactory) -> None:
    views = [view("a", labels={"pool": "premium", "region": "eu"}),
             view("b", labels={"pool": "premium", "region": "us"}),
             view("c", labels={"pool": "economy", "region": "eu"}), view("d")]
    request = RoutingRequest("r", "m")
    both = LabelsFilter("labels", {"pool": "premium", "region": "eu"})
    assert [v.id for v in both.filter(request, views, CycleState())] == ["a"]
    pool = LabelsFilter("pool", {"pool": "premium"})
    assert [v.id for v in pool.filter(request, views, CycleState())] == ["a", "b"]
    assert [v.id for v in LabelsFilter("all", {}).filter(request, views, CycleState())] == [
        "a", "b", "c", "d"]
