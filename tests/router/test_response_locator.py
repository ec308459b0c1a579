"""The search budget of ``router.response_locator``: how often workers are asked for a response
id the router has no record of (the search itself is tested through live routers in
``test_responses_api.py``)."""

from __future__ import annotations

from router.response_locator import SearchBudget


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_of_the_rate_then_the_rate_a_second() -> None:
    clock = Clock()
    budget = SearchBudget(5.0, clock)
    assert [budget.take() for _ in range(7)] == [True] * 5 + [False] * 2
    clock.now += 0.2                        # one search's worth
    assert [budget.take(), budget.take()] == [True, False]
    clock.now += 60.0                       # idle: never more than one burst saved up
    assert sum(budget.take() for _ in range(20)) == 5
