"""policies/scorers/queue_depth.py and the shared normalisation."""

from __future__ import annotations

from collections.abc import Callable

from policies.base import CycleState, RoutingRequest
from policies.scorers.queue_depth import QueueDepthParams, QueueDepthScorer
from workers.models import WorkerView

ViewFactory = Callable[..., WorkerView]


def score(params: QueueDepthParams, views: list[WorkerView]) -> dict[str, float]:
    return dict(QueueDepthScorer("q", params).score(RoutingRequest("r", "m"), views, CycleState()))


def test_relative_is_min_max(view: ViewFactory) -> None:
    views = [view("a", waiting=2, running=9), view("b", waiting=6), view("c", waiting=10)]
    assert score(QueueDepthParams(), views) == {"a": 1.0, "b": 0.5, "c": 0.0}
    with_running = score(QueueDepthParams(include_running=True), views)
    assert with_running == {"a": 0.0, "b": 1.0, "c": 0.2}


def test_equal_loads_all_score_one(view: ViewFactory) -> None:
    views = [view("a", waiting=3), view("b", waiting=3)]
    assert score(QueueDepthParams(), views) == {"a": 1.0, "b": 1.0}


def test_absolute_against_threshold(view: ViewFactory) -> None:
    views = [view("a", waiting=0), view("b", waiting=16), view("c", waiting=100)]
    assert score(QueueDepthParams(mode="absolute", threshold=64), views) == {
        "a": 1.0, "b": 0.75, "c": 0.0}
