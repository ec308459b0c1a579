"""Goodput search on a known attainment curve (a pure function, no simulation)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sim.goodput import find_goodput


def _knee(at: float) -> Callable[[float], float]:
    return lambda scale: 1.0 if scale <= at else 0.8 - 0.1 * scale


def test_search_upwards_brackets_and_bisects() -> None:
    search = find_goodput(_knee(3.0), 1.0, bisections=5)
    # 1 pass, 2 pass, 4 fail, then bisect [2, 4]: 3 p, 3.5 f, 3.25 f, 3.125 f, 3.0625 f
    assert [s for s, _ in search.probes] == [1.0, 2.0, 4.0, 3.0, 3.5, 3.25, 3.125, 3.0625]
    assert search.rate_scale == 3.0


def test_search_downwards_when_start_fails() -> None:
    search = find_goodput(_knee(0.3), 1.0, bisections=2)
    assert [s for s, _ in search.probes] == [1.0, 0.5, 0.25, 0.375, 0.3125]
    assert search.rate_scale == 0.25


def test_never_passing_gives_zero_and_stops_on_a_plateau() -> None:
    curve = {1.0: 0.40, 0.5: 0.52, 0.25: 0.53, 0.125: 0.532}
    search = find_goodput(lambda s: curve[s], 1.0, max_doublings=5)
    # 0.5 gains 0.12 and 0.25 gains 0.01: go on; 0.125 gains 0.002 < 0.005: stop
    assert [s for s, _ in search.probes] == [1.0, 0.5, 0.25, 0.125]
    assert search.rate_scale == 0.0
    flat = find_goodput(lambda s: 0.5, 1.0, max_doublings=5)
    assert [s for s, _ in flat.probes] == [1.0, 0.5]
    assert flat.rate_scale == 0.0


def test_bad_start_is_refused() -> None:
    with pytest.raises(ValueError, match="start scale"):
        find_goodput(lambda s: 1.0, 0.0)


def test_a_search_that_never_fails_says_its_scale_is_a_lower_bound() -> None:
    """A trace too light for the fleet passed at every doubling; its last scale was
    reported as the goodput, and a scorecard judged 64 against 64 as a missed goal."""
    search = find_goodput(lambda scale: 1.0, 1.0, max_doublings=6)
    assert (search.rate_scale, search.capped) == (64.0, True)
    assert not find_goodput(_knee(3.0), 1.0).capped
    assert not find_goodput(_knee(0.3), 1.0).capped


def test_a_search_that_stops_on_a_plateau_says_so_with_its_idle_attainment() -> None:
    """An L40S fleet at a fraction of the rate: attainment rose, then stopped rising. The
    goodput 0.0 then means 'not met even near idle', and the attainment there is kept."""
    curve = {1.0: 0.017, 0.5: 0.13, 0.25: 0.34, 0.125: 0.383, 0.0625: 0.393, 0.03125: 0.393}
    search = find_goodput(lambda s: curve[s], 1.0)
    assert search.rate_scale == 0.0
    assert search.floor == "plateau"
    assert search.smallest_scale == 0.03125
    assert search.idle_attainment == 0.393


def test_a_search_whose_halvings_run_out_while_rising_says_it_hit_its_limit() -> None:
    """Attainment still rising at 1/64: the goodput is below that scale, not 'none'."""
    search = find_goodput(lambda s: 0.9 - 0.2 * s ** 0.25 - 0.01, 1.0, max_doublings=6)
    assert [s for s, _ in search.probes][-1] == 1 / 64
    assert search.rate_scale == 0.0
    assert search.floor == "limit"
    assert search.idle_attainment == pytest.approx(0.89 - 0.2 * (1 / 64) ** 0.25)


def test_a_search_that_passes_somewhere_has_no_floor() -> None:
    for search in (find_goodput(_knee(3.0), 1.0), find_goodput(_knee(0.3), 1.0),
                   find_goodput(lambda s: 1.0, 1.0)):
        assert search.rate_scale > 0
        assert search.floor is None and search.idle_attainment is None


def test_the_attainment_target_is_the_searchs() -> None:
    """--slo-attainment reaches the search: a lower target passes at a higher scale."""
    curve = _knee(2.0)           # 1.0 up to 2, then 0.8 - 0.1 * scale: 0.4 at 4, 0 at 8
    assert find_goodput(curve, 1.0, bisections=0).rate_scale == 2.0
    assert find_goodput(curve, 1.0, target=0.35, bisections=0).rate_scale == 4.0
