"""policies/pickers/random_choice.py."""

from __future__ import annotations

import random

from policies.base import CandidateScore, CycleState, RoutingRequest
from policies.pickers.random_choice import RandomPicker


def test_uniform_choice_follows_the_seeded_generator() -> None:
    candidates = [CandidateScore(w, t, {}) for w, t in [("a", 0.0), ("b", 9.0), ("c", 1.0)]]
    picker = RandomPicker("random", random.Random(11))
    got = [picker.pick(RoutingRequest("r", "m"), candidates, CycleState()).worker_id
           for _ in range(30)]
    rng = random.Random(11)
    assert got == [rng.choice(candidates).worker_id for _ in range(30)]
    assert set(got) == {"a", "b", "c"}
