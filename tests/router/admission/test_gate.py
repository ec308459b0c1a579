"""The in-flight limit: requests beyond it wait, highest priority first and in arrival order
within one; a full queue and a long wait are refused; a waiter that leaves never takes a
slot with it; a raised or removed limit lets the waiters through."""

from __future__ import annotations

import asyncio

import pytest

from router.admission.gate import ConcurrencyGate, GateClosed, GateFull, GateTimeout


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_requests_over_the_limit_wait_for_a_slot() -> None:
    gate = ConcurrencyGate()
    assert await gate.enter(2, 10, 5.0) == 0.0
    assert await gate.enter(2, 10, 5.0) == 0.0
    third = asyncio.create_task(gate.enter(2, 10, 5.0))
    await _settle()
    assert not third.done() and (gate.in_flight, gate.waiting) == (2, 1)
    gate.leave()
    waited = await third
    assert waited > 0.0 and (gate.in_flight, gate.waiting) == (2, 0)


def test_a_wait_shorter_than_a_millisecond_counts_as_a_wait_under_uvloop() -> None:
    """The router serves on uvloop, whose clock ticks in milliseconds: a request handed a
    slot within the same millisecond read 0 s waited, and its tenant's budget, checked
    again only after a wait, was not (others may have spent it meanwhile)."""
    import uvloop

    async def short_wait() -> float:
        gate = ConcurrencyGate()
        await gate.enter(1, 10, 5.0)
        waiter = asyncio.create_task(gate.enter(1, 10, 5.0))
        await _settle()
        gate.leave()
        return await waiter

    assert all(uvloop.run(short_wait()) > 0.0 for _ in range(20))


async def test_waiters_go_by_priority_then_by_arrival() -> None:
    gate = ConcurrencyGate()
    await gate.enter(1, 10, 5.0)
    order: list[str] = []

    async def wait(name: str, priority: int) -> None:
        await gate.enter(1, 10, 5.0, priority)
        order.append(name)

    tasks = []
    for name, priority in [("low-1", 0), ("low-2", 0), ("high", 5), ("low-3", 0),
                           ("batch", -1), ("high-2", 5)]:
        tasks.append(asyncio.create_task(wait(name, priority)))
        await _settle()
    for _ in tasks:
        gate.leave()
        await _settle()
    await asyncio.gather(*tasks)
    assert order == ["high", "high-2", "low-1", "low-2", "low-3", "batch"]


async def test_a_newcomer_does_not_pass_the_queue_when_a_slot_frees() -> None:
    gate = ConcurrencyGate()
    await gate.enter(1, 10, 5.0)
    waiter = asyncio.create_task(gate.enter(1, 10, 5.0))
    await _settle()
    gate.leave()                      # the slot goes to the waiter at once
    newcomer = asyncio.create_task(gate.enter(1, 10, 5.0))
    await _settle()
    assert waiter.done() and not newcomer.done()
    gate.leave()
    await newcomer
    assert gate.in_flight == 1


async def test_a_full_queue_refuses_at_once() -> None:
    gate = ConcurrencyGate()
    await gate.enter(1, 1, 5.0)
    waiter = asyncio.create_task(gate.enter(1, 1, 5.0))
    await _settle()
    with pytest.raises(GateFull):
        await gate.enter(1, 1, 5.0)
    with pytest.raises(GateFull):
        await gate.enter(1, 0, 5.0)   # no queue at all
    gate.leave()
    await waiter
    assert (gate.in_flight, gate.waiting) == (1, 0)


async def test_a_long_wait_is_refused_and_frees_its_place() -> None:
    gate = ConcurrencyGate()
    await gate.enter(1, 1, 5.0)
    with pytest.raises(GateTimeout):
        await gate.enter(1, 1, 0.05)
    assert (gate.in_flight, gate.waiting) == (1, 0)
    next_one = asyncio.create_task(gate.enter(1, 1, 5.0))   # the queue has room again
    await _settle()
    gate.leave()
    await next_one
    assert gate.in_flight == 1


async def test_a_waiter_whose_client_left_takes_no_slot() -> None:
    gate = ConcurrencyGate()
    await gate.enter(1, 10, 5.0)
    gone = asyncio.create_task(gate.enter(1, 10, 5.0))
    stays = asyncio.create_task(gate.enter(1, 10, 5.0))
    await _settle()
    gone.cancel()
    await _settle()
    assert gate.waiting == 1
    gate.leave()
    await stays
    assert (gate.in_flight, gate.waiting) == (1, 0)


async def test_waiters_that_left_do_not_pile_up_behind_the_ones_that_stay() -> None:
    """A slot held, a waiter of high priority staying, and 2,000 of low priority timing out
    behind it: the queue keeps what waits, not every one that ever waited."""
    gate = ConcurrencyGate()
    await gate.enter(1, 10_000, 5.0)
    stays = asyncio.create_task(gate.enter(1, 10_000, 5.0, priority=9))
    await _settle()
    for _ in range(20):
        leaving = [asyncio.create_task(gate.enter(1, 10_000, 0.001)) for _ in range(100)]
        results = await asyncio.gather(*leaving, return_exceptions=True)
        assert all(isinstance(r, GateTimeout) for r in results)
    assert gate.waiting == 1
    assert len(gate._heap) <= 2 * gate.waiting + 64
    gate.leave()
    await stays
    assert (gate.in_flight, gate.waiting) == (1, 0)


async def test_a_slot_handed_to_a_waiter_as_it_leaves_is_passed_on() -> None:
    gate = ConcurrencyGate()
    await gate.enter(1, 10, 5.0)
    first = asyncio.create_task(gate.enter(1, 10, 5.0))
    second = asyncio.create_task(gate.enter(1, 10, 5.0))
    await _settle()
    gate.leave()              # first is granted the slot ...
    first.cancel()            # ... and cancelled before it could run
    with pytest.raises(asyncio.CancelledError):
        await first
    await second              # the slot went on to the next waiter
    assert (gate.in_flight, gate.waiting) == (1, 0)


async def test_raising_or_removing_the_limit_lets_waiters_through() -> None:
    gate = ConcurrencyGate()
    await gate.enter(1, 10, 5.0)
    waiters = [asyncio.create_task(gate.enter(1, 10, 5.0)) for _ in range(4)]
    await _settle()
    # a reload raised the limit to 3: the next request brings it, two waiters go on, and
    # the newcomer (of a higher priority) waits first in line
    newcomer = asyncio.create_task(gate.enter(3, 10, 5.0, priority=9))
    await _settle()
    assert sum(w.done() for w in waiters) == 2 and not newcomer.done()
    assert (gate.in_flight, gate.waiting) == (3, 3)
    await gate.enter(0, 10, 5.0)                 # ... then removed it
    await asyncio.gather(*waiters, newcomer)
    assert (gate.in_flight, gate.waiting) == (7, 0)


async def test_without_a_limit_every_request_passes_and_is_counted() -> None:
    gate = ConcurrencyGate()
    for _ in range(100):
        assert await gate.enter(0, 0, 1.0) == 0.0
    assert gate.in_flight == 100
    for _ in range(100):
        gate.leave()
    assert gate.in_flight == 0


async def test_a_higher_priority_takes_the_place_of_the_newest_lowest_waiter() -> None:
    """A queue full of batch work turned a premium tenant away at once (503)."""
    gate = ConcurrencyGate()
    await gate.enter(1, 3, 5.0)
    batch_old = asyncio.create_task(gate.enter(1, 3, 5.0, priority=-1))
    await _settle()
    normal = asyncio.create_task(gate.enter(1, 3, 5.0, priority=0))
    await _settle()
    batch_new = asyncio.create_task(gate.enter(1, 3, 5.0, priority=-1))
    await _settle()
    assert gate.waiting == 3
    premium = asyncio.create_task(gate.enter(1, 3, 5.0, priority=1))
    await _settle()
    assert batch_new.done() and isinstance(batch_new.exception(), GateFull)   # its place taken
    assert not batch_old.done() and not premium.done() and gate.waiting == 3
    with pytest.raises(GateFull):                    # no waiter is lower than another batch
        await gate.enter(1, 3, 5.0, priority=-1)
    order = []
    for task, name in ((premium, "premium"), (normal, "normal"), (batch_old, "batch")):
        gate.leave()
        await _settle()
        assert task.done() and task.exception() is None
        order.append(name)
    assert order == ["premium", "normal", "batch"]
    assert (gate.in_flight, gate.waiting) == (1, 0)


async def test_closing_turns_the_waiters_away_and_lets_the_ones_in_flight_finish() -> None:
    """At a drain the waiters waited it out and were cut with no answer: they had reached no
    worker, and another router could have taken them at once."""
    gate = ConcurrencyGate()
    await gate.enter(1, 8, 30.0)
    waiters = [asyncio.create_task(gate.enter(1, 8, 30.0, priority)) for priority in (0, 1)]
    await _settle()
    assert gate.close() == 2
    for waiter in waiters:
        with pytest.raises(GateClosed):
            await waiter
    with pytest.raises(GateClosed):            # nor does any request wait from now on
        await gate.enter(1, 8, 30.0)
    assert (gate.in_flight, gate.waiting) == (1, 0)
    gate.leave()
    assert gate.in_flight == 0
    await gate.enter(1, 8, 30.0)               # a slot free: in flight, no wait
