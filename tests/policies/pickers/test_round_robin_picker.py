"""policies/pickers/round_robin.py."""

from __future__ import annotations

from policies.base import CandidateScore, CycleState, RoutingRequest
from policies.pickers.round_robin import RoundRobinPicker

REQUEST = RoutingRequest("r", "m")


def cands(*ids: str) -> list[CandidateScore]:
    return [CandidateScore(i, 1.0 if i == "c" else 0.0, {}) for i in ids]


def test_rotates_by_worker_id_ignoring_scores() -> None:
    picker = RoundRobinPicker("rr")
    picks = [picker.pick(REQUEST, cands("c", "a", "b"), CycleState()).worker_id for _ in range(5)]
    assert picks == ["a", "b", "c", "a", "b"]


def test_candidate_set_changes_keep_the_rotation() -> None:
    picker = RoundRobinPicker("rr")
    assert picker.pick(REQUEST, cands("a", "b", "c"), CycleState()).worker_id == "a"
    assert picker.pick(REQUEST, cands("a", "c"), CycleState()).worker_id == "c"
    assert picker.pick(REQUEST, cands("a", "b", "c"), CycleState()).worker_id == "a"


def test_inherits_position() -> None:
    old = RoundRobinPicker("rr")
    old.pick(REQUEST, cands("a", "b"), CycleState())
    new = RoundRobinPicker("rr")
    new.inherit_state(old)
    assert new.pick(REQUEST, cands("a", "b"), CycleState()).worker_id == "b"
