"""policies/pickers/power_of_two.py."""

from __future__ import annotations

import random

from policies.base import CandidateScore, CycleState, RoutingRequest
from policies.pickers.power_of_two import PowerOfTwoPicker

REQUEST = RoutingRequest("r", "m")


def test_better_of_two_samples() -> None:
    candidates = [CandidateScore(w, t, {}) for w, t in [("a", 0.1), ("b", 0.5), ("c", 0.9)]]
    picker = PowerOfTwoPicker("p2", random.Random(3))
    got = [picker.pick(REQUEST, candidates, CycleState()).worker_id for _ in range(50)]
    rng = random.Random(3)
    want = []
    for _ in range(50):
        first, second = rng.sample(candidates, 2)
        want.append((second if second.total > first.total else first).worker_id)
    assert got == want
    assert "a" not in got                      # the worst never wins a pair
    assert set(got) == {"b", "c"}


def test_single_candidate() -> None:
    only = CandidateScore("a", 0.0, {})
    assert PowerOfTwoPicker("p2", random.Random(0)).pick(REQUEST, [only], CycleState()) is only
