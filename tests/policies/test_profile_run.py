"""policies/profile.py: weighting, clamping, ranking and candidate objects."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Mapping, Sequence

import pytest

from policies.base import CandidateScore, CycleState, RoutingRequest
from policies.pickers.max_score import MaxScorePicker
from policies.profile import Profile, WeightedScorer, _clamped, _new_candidate
from workers.models import WorkerView

ViewFactory = Callable[..., WorkerView]


class _Fixed:
    def __init__(self, name: str, scores: Mapping[str, object]) -> None:
        self.name = name
        self.scores = scores

    def score(self, request: RoutingRequest, workers: Sequence[WorkerView],
              cycle: CycleState) -> Mapping[str, float]:
        return self.scores  # type: ignore[return-value]


def test_weighted_sum_and_stable_ranking(view: ViewFactory) -> None:
    profile = Profile("p", (), (
        WeightedScorer(_Fixed("a", {"w1": 0.5, "w2": 1.0, "w3": 0.25}), 2.0),
        WeightedScorer(_Fixed("b", {"w1": 1.0, "w2": 0.0, "w3": 0.5}), 1.0)),
        MaxScorePicker("max", 1e-9, random.Random(0)))
    views = [view("w1"), view("w2"), view("w3")]
    result = profile.run(RoutingRequest("r", "m"), views, CycleState())
    assert [(c.worker_id, c.total) for c in result.candidates] == [
        ("w1", 2.0), ("w2", 2.0), ("w3", 1.0)]
    assert result.chosen is not None and result.chosen.worker_id in {"w1", "w2"}
    assert result.decided_by == "max"


@pytest.mark.parametrize(("column", "expected"), [
    ([0.0, 0.5, 1.0], [0.0, 0.5, 1.0]),
    ([-1.0, 2.0, 0.5], [0.0, 1.0, 0.5]),
    ([float("nan"), 0.5], [0.0, 0.5]),
    ([float("inf"), 0.5], [1.0, 0.5]),
    ([None, "x", 0.5, True], [0.0, 0.0, 0.5, 1.0]),
    ([], []),
])
def test_clamped(column: list[object], expected: list[float]) -> None:
    assert _clamped(column) == expected


def test_fast_candidate_is_an_ordinary_frozen_candidate() -> None:
    fast = _new_candidate("w", 1.5, {"a": 1.0})
    assert fast == CandidateScore("w", 1.5, {"a": 1.0})
    assert type(fast) is CandidateScore
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.total = 2.0  # type: ignore[misc]


class _SortsInPlace:
    """A plugin's scorer that sorts the views it is given (a list once)."""

    name = "sorts"

    def score(self, request: RoutingRequest, workers: Sequence[WorkerView],
              cycle: CycleState) -> Mapping[str, float]:
        workers.sort(key=lambda v: v.info.id, reverse=True)  # type: ignore[attr-defined]
        return {}


class _ColumnById:
    """A built-in-style scorer: its scores in the order of the views (no worker ids)."""

    name = "column"

    def __init__(self, scores: Mapping[str, float]) -> None:
        self.scores = scores

    def score(self, request: RoutingRequest, workers: Sequence[WorkerView],
              cycle: CycleState) -> Mapping[str, float]:
        return {}

    def score_column(self, request: RoutingRequest, workers: Sequence[WorkerView],
                     cycle: CycleState) -> list[float]:
        return [self.scores[v.info.id] for v in workers]


class _RemovesInPlace:
    name = "removes"

    def filter(self, request: RoutingRequest, workers: Sequence[WorkerView],
               cycle: CycleState) -> Sequence[WorkerView]:
        del workers[0]  # type: ignore[attr-defined]
        return workers


def test_a_plugin_cannot_reorder_or_edit_the_views_the_others_score(view: ViewFactory) -> None:
    """Given the profile's own list, a scorer sorting it moved the next scorers' columns
    onto other workers (the idle one scored as the busy one), and a filter deleting from it
    removed a worker with no word in ``filtered_out``: each is given a tuple now, fails, and
    is skipped as any failing plugin is."""
    profile = Profile("p", (_RemovesInPlace(),), (  # type: ignore[arg-type]
        WeightedScorer(_SortsInPlace(), 1.0),
        WeightedScorer(_ColumnById({"w1": 1.0, "w2": 0.0, "w3": 0.5}), 1.0)),
        MaxScorePicker("max", 1e-9, random.Random(0)))
    result = profile.run(RoutingRequest("r", "m"), [view("w1"), view("w2"), view("w3")],
                         CycleState())
    assert result.skipped == ("removes", "sorts")
    assert dict(result.filtered_out) == {}
    assert {c.worker_id: c.scores["column"] for c in result.candidates} == {
        "w1": 1.0, "w2": 0.0, "w3": 0.5}
    assert result.chosen is not None and result.chosen.worker_id == "w1"


class _Raises:
    name = "zone"

    def filter(self, request: RoutingRequest, workers: Sequence[WorkerView],
               cycle: CycleState) -> Sequence[WorkerView]:
        raise RuntimeError("zone table unreadable")


def test_a_refusing_filter_that_fails_leaves_no_candidate(view: ViewFactory) -> None:
    """A filter that must never be bypassed (residency) let every worker through when it
    failed; with ``on_failure: refuse`` the request has no candidate, and says why."""
    views = [view("w1"), view("w2")]
    passing = Profile("p", (_Raises(),), (), MaxScorePicker("max", 1e-9, random.Random(0)))
    result = passing.run(RoutingRequest("r", "m"), views, CycleState())
    assert result.chosen is not None and result.skipped == ("zone",)
    refusing = Profile("p", (_Raises(),), (), MaxScorePicker("max", 1e-9, random.Random(0)),
                       refusing_filters=frozenset({"zone"}))
    result = refusing.run(RoutingRequest("r", "m"), views, CycleState())
    assert result.chosen is None and result.skipped == ("zone",)
    assert dict(result.filtered_out) == {"w1": "zone (failed)", "w2": "zone (failed)"}
    assert result.reason == "no candidate: 2 worker(s) filtered out (2 by zone (failed))"
