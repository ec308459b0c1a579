"""Budgets' usage over the last minute: slots expire a minute after they were written, the
totals follow, the time until a budget is back under its limit, and what is published to
the other replicas (and read back from them)."""

from __future__ import annotations

import random

from router.admission.usage import SCHEDULE_STEPS, WINDOW_S, TenantUsage, UsageWindow


def test_counts_leave_the_window_a_minute_after_they_were_made() -> None:
    window = UsageWindow()
    window.add(100.2, requests=1, tokens=10)
    window.add(130.9, requests=2, tokens=5)
    assert window.totals(130.9) == (3, 15)
    assert window.totals(159.99) == (3, 15)     # second 100 is still inside [100, 159]
    assert window.totals(160.0) == (2, 5)       # second 100 left
    assert window.totals(190.5) == (0, 0)
    assert window.totals(10_000.0) == (0, 0)    # a long silence clears everything at once


def test_totals_match_a_plain_count_of_the_last_minute() -> None:
    rng = random.Random(7)
    window = UsageWindow()
    events: list[tuple[float, int, int]] = []
    now = 0.0
    for _ in range(3000):
        now += rng.expovariate(20.0) if rng.random() < 0.97 else rng.uniform(0, 90)
        requests, tokens = rng.randint(0, 2), rng.randint(-5, 500)
        window.add(now, requests, tokens)
        events.append((now, requests, tokens))
        second = int(now)
        inside = [e for e in events if int(e[0]) > second - WINDOW_S]
        assert window.totals(now) == (sum(e[1] for e in inside), sum(e[2] for e in inside))


def test_left_after_says_what_remains_as_the_old_slots_expire() -> None:
    window = UsageWindow()
    window.add(0.5, requests=3, tokens=30)
    window.add(20.5, requests=1, tokens=10)
    assert window.left_after(30.0, 1) == (4, 40)
    assert window.left_after(30.0, 29) == (4, 40)
    assert window.left_after(30.0, 30) == (1, 10)     # second 0 leaves at 60
    assert window.left_after(30.0, 49) == (1, 10)
    assert window.left_after(30.0, 50) == (0, 0)      # second 20 at 80


def test_seconds_until_a_budget_is_under_its_limit() -> None:
    usage = TenantUsage()
    usage.add("acme", 10.0, requests=5)
    usage.add("acme", 40.0, requests=5)
    # 10 requests, limit 10: the five of second 10 leave at 70, 30 s after 40
    assert usage.seconds_until("acme", 40.0, 10, None) == 30
    # limit 6: the same slot has to go
    assert usage.seconds_until("acme", 40.0, 6, None) == 30
    # limit 5: the second slot must go too (at 100)
    assert usage.seconds_until("acme", 40.0, 5, None) == WINDOW_S
    usage.add("acme", 40.0, tokens=1000)
    assert usage.seconds_until("acme", 40.0, None, 2000) == 1   # already under it
    assert usage.seconds_until("nobody", 40.0, 1, 1) == 1


def test_other_replicas_count_and_fade_evenly() -> None:
    usage = TenantUsage()
    usage.add("acme", 0.0, requests=2)
    usage.remote = {"acme": (8, 100)}
    assert usage.totals("acme", 0.0) == (10, 100)
    assert usage.totals("globex", 0.0) == (0, 0)
    usage.remote = {"globex": (3, 0)}
    assert usage.totals("globex", 0.0) == (3, 0)
    # only the others' 30 requests: under 15 once half of them faded, after 30 s
    usage.remote = {"initech": (30, 0)}
    assert usage.seconds_until("initech", 0.0, 15, None) == 31


def test_published_totals_drop_the_windows_that_emptied() -> None:
    usage = TenantUsage()
    usage.add("acme", 0.0, requests=1, tokens=7)
    usage.add("*", 30.0, requests=1)
    assert usage.published(30.0) == {"acme": (1, 7), "*": (1, 0)}
    assert len(usage) == 2
    assert usage.published(61.0) == {"*": (1, 0)}
    assert len(usage) == 1
    usage.add("*", 62.0, tokens=5)
    usage.add("*", 62.0, tokens=-5)           # a refund that cancels the charge
    assert usage.published(95.0) == {}
    assert len(usage) == 0


def test_a_settlement_lands_in_the_second_of_its_charge() -> None:
    usage = TenantUsage()
    usage.add("acme", 100.5, tokens=3043)
    usage.settle("acme", 120.0, 100.5, -3000)        # refunded where it was charged
    assert usage.totals("acme", 120.0) == (0, 43)
    assert usage.totals("acme", 160.0) == (0, 0)     # and leaves with it
    usage.add("acme", 200.0, tokens=100)
    usage.settle("acme", 270.0, 200.0, -100)         # the charge left already: nothing
    usage.settle("acme", 270.0, 200.0, 50)           # an excess is spending now
    assert usage.totals("acme", 270.0) == (0, 50)


def test_a_refund_for_a_charge_exactly_a_minute_old_is_dropped_not_taken_from_now() -> None:
    """A charge 60 s old shares its slot with the current second: its refund was booked there,
    and a tenant's spending read below zero (more than its tokens_per_minute let through)."""
    usage = TenantUsage()
    usage.add("acme", 100.2, tokens=500)
    usage.add("acme", 159.9, tokens=7)
    usage.settle("acme", 159.9, 100.2, -400)         # 59 s on: still in the window
    assert usage.totals("acme", 159.9) == (0, 107)
    usage.add("acme", 160.1, tokens=10)              # second 100 left at 160
    assert usage.totals("acme", 160.1) == (0, 17)
    usage.settle("acme", 160.5, 100.2, -400)         # exactly 60 s on: dropped
    assert usage.totals("acme", 160.5) == (0, 17)
    usage.settle("acme", 160.5, 100.2, 30)           # an excess is spending now
    assert usage.totals("acme", 160.5) == (0, 47)
    assert usage.totals("acme", 219.9) == (0, 40)    # second 159 left; 160 stays
    assert usage.totals("acme", 220.0) == (0, 0)


def test_other_replicas_spending_leaves_by_their_published_schedule() -> None:
    """Another replica's budget spent a second ago leaves in a minute: taken to fade
    evenly, five requests on a limit of five read as having room in a second."""
    here, there = TenantUsage(), TenantUsage()
    there.add("acme", 999.5, requests=5)
    here.remote = there.published(1000.0)
    here.remote_schedule = there.published_schedule(1000.0)
    assert here.remote_schedule["acme"] == ((5, 0),) * SCHEDULE_STEPS
    assert here.seconds_until("acme", 1000.0, 5, None) == WINDOW_S
    here.remote_schedule = {}                 # without a schedule: the even fading
    assert here.seconds_until("acme", 1000.0, 5, None) == 1
    there.add("acme", 960.5, requests=4)      # spent 40 s ago: leaves in 20 s
    here.remote = there.published(1000.0)
    here.remote_schedule = there.published_schedule(1000.0)
    assert here.remote_schedule["acme"][:2] == ((9, 0), (5, 0))
    assert here.seconds_until("acme", 1000.0, 6, None) == 20    # rounded up to a step
