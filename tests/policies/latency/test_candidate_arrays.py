"""policies/latency/candidate_arrays.py: the shortlist's partial selection."""

from __future__ import annotations

import random

import numpy as np
import pytest

from policies.latency.candidate_arrays import smallest_positions


@pytest.mark.parametrize("seed", range(40))
def test_smallest_positions_are_the_head_of_a_stable_argsort(seed: int) -> None:
    rng = random.Random(seed)
    size = rng.choice((1, 2, 5, 33, 200, 1000))
    pool = [rng.uniform(0.0, 10.0) for _ in range(rng.choice((2, 5, 50, 1000)))]
    pool += [0.0, -0.0, float("inf")]
    if seed % 5 == 0:
        pool.append(float("nan"))
    values = np.array([rng.choice(pool) for _ in range(size)], dtype=float)
    for count in (0, 1, 8, 24, size - 1, size, size + 3):
        expected = set(np.argsort(values, kind="stable")[:max(count, 0)].tolist())
        assert set(smallest_positions(values, count)) == expected
        assert len(smallest_positions(values, count)) == len(expected)


def test_ties_go_to_the_earlier_position() -> None:
    values = np.array([3.0, 1.0, 2.0, 1.0, 1.0, 0.5])
    assert sorted(smallest_positions(values, 3)) == [1, 3, 5]
    assert sorted(smallest_positions(values, 4)) == [1, 3, 4, 5]
