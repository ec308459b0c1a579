"""policies/pickers/max_score.py."""

from __future__ import annotations

import random
from collections import Counter

from policies.base import CandidateScore, CycleState, RoutingRequest
from policies.pickers.max_score import MaxScorePicker

REQUEST = RoutingRequest("r", "m")


def c(worker_id: str, total: float) -> CandidateScore:
    return CandidateScore(worker_id, total, {})


def test_highest_total_wins() -> None:
    picker = MaxScorePicker("max", 1e-9, random.Random(0))
    chosen = picker.pick(REQUEST, [c("a", 0.2), c("b", 1.7), c("c", 1.6)], CycleState())
    assert chosen.worker_id == "b"


def test_ties_are_broken_at_random_reproducibly() -> None:
    candidates = [c("a", 1.0), c("b", 1.0), c("c", 0.5)]

    def picks(seed: int) -> list[str]:
        picker = MaxScorePicker("max", 1e-9, random.Random(seed))
        return [picker.pick(REQUEST, candidates, CycleState()).worker_id for _ in range(200)]

    first = picks(7)
    assert first == picks(7)
    counts = Counter(first)
    assert set(counts) == {"a", "b"}
    assert min(counts.values()) > 60          # both tied workers get a fair share
    expected = random.Random(7)
    assert first[:5] == [expected.choice(["a", "b"]) for _ in range(5)]


def test_tolerance_widens_the_tie() -> None:
    picker = MaxScorePicker("max", 0.2, random.Random(1))
    seen = {picker.pick(REQUEST, [c("a", 1.0), c("b", 0.9), c("c", 0.5)], CycleState()).worker_id
            for _ in range(100)}
    assert seen == {"a", "b"}
