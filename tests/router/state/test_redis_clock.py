"""Redis's clock as a replica carries it between ``TIME`` readings, and how far the host's
wall clock is from it."""

from __future__ import annotations

import pytest

from router.state.redis_clock import RedisClock


class FakeClocks:
    def __init__(self) -> None:
        self.monotonic = 100.0
        self.wall = 1_700_000_000.0

    def tick(self, seconds: float) -> None:
        self.monotonic += seconds
        self.wall += seconds


def test_redis_time_is_carried_on_the_monotonic_clock_from_midway_through_the_trip() -> None:
    clocks = FakeClocks()
    clock = RedisClock(lambda: clocks.wall, lambda: clocks.monotonic)
    assert not clock.known
    with pytest.raises(RuntimeError):
        clock.now_ms()
    started = clock.started()
    clocks.tick(0.010)                       # Redis read its clock within the trip
    clock.learn((1_700_000_300, 5_000), started)     # 300 s ahead of this host
    assert clock.known and clock.skewed and clock.skew_s == pytest.approx(-300.0)
    assert clock.now_ms() == 1_700_000_300_010         # (read at 5 ms, now 5 ms on)
    clocks.tick(2.0)
    clocks.wall -= 50                        # an NTP step moves the wall clock only
    assert clock.now_ms() == 1_700_000_302_010


def test_a_wall_clock_near_redis_time_is_not_skewed() -> None:
    clocks = FakeClocks()
    clock = RedisClock(lambda: clocks.wall, lambda: clocks.monotonic)
    clock.learn((int(clocks.wall) + 2, 0), clock.started())
    assert not clock.skewed and clock.skew_s == pytest.approx(-2.0)
